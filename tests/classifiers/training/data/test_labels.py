"""Labelling by the reply a request calls for (a table of the notes' rules)."""

from __future__ import annotations

import pytest

from classifiers.training.data.labels import label_text
from classifiers.training.data.sources_tools import label_by_reply


@pytest.mark.parametrize(
    ("text", "default", "expected"),
    [
        ("What is AI?", "chat", "technical"),  # short is not casual
        ("什么是量子计算？", "chat", "technical"),
        ("can you write a factorial in TypeScript?", "chat", "code"),
        ("make a binary tree in Python", "chat", "code"),
        ("can you write insertion sort?", "chat", "code"),
        ("can you write a poem about rain?", "chat", "prose"),
        ("Write a detailed analysis of whether remote work raises productivity", "chat",
         "technical"),
        ("用Python写一个函数，判断回文", "chat", "code"),
        ("Write a poem about autumn.", "technical", "prose"),
        ("写一首关于秋天的诗", "chat", "prose"),
        ("分享一个关于一只怕水的鸭子的轻松故事，再加一个有趣的事实。", "technical", "prose"),
        ("thanks!", "technical", "chat"),
        ("你好呀", "technical", "chat"),
        ("Tell me a joke", "technical", "chat"),
        ("What is your favorite color?", "technical", "chat"),
        ("My printer is not printing.", "chat", "technical"),
        ("Explain how DNS works", "chat", "technical"),
        ("hi, how are you?", "technical", "chat"),
        ("hello! what's your name?", "technical", "chat"),
        ("你好，请问一下在阿里云CPU服务器上跑可以吗？比较理想的cpu配置是什么？", "chat", "technical"),
        ("hey, how do I mount a USB drive on Debian?", "chat", "technical"),
        (("对话到第二次的时候就报错UnicodeDecodeError，对话第一次是没问题的，模型返回输出后又给到请输入你的"
          "问题，我再输入问题就报错"), "chat", "technical"),
        ("Are you broken?", "technical", "chat"),
        ("mmm", "chat", "chat"),
        ("mmm", "technical", "technical"),
    ],
)
def test_label_text(text: str, default: str, expected: str) -> None:
    assert label_text(text, default) == expected


@pytest.mark.parametrize(
    ("request_text", "reply", "expected"),
    [
        ("生成检查质数的代码", "```python\ndef is_prime(n):\n    return n > 1\n```", "code"),
        ("你能帮我订一份披萨吗？", "抱歉，我无法帮你订披萨。", "chat"),
        ("新鲜意大利面和干意大利面有什么不同？", "新鲜意大利面含水量高，口感柔软；" * 5, "technical"),
        ("写一首关于春天的诗", "春风拂面，" * 20, "prose"),
        ("您能解释一下人工智能的概念吗？", "人工智能是让机器模拟智能的技术。", "technical"),
        ("你能帮我订一张去纽约的机票吗？", "抱歉，我无法预订机票，我只能帮你计算距离。" * 2, "chat"),
        # thanks is chat in every script: the English "you're welcome" is 66 characters, the
        # Chinese one 20, and a reply-length rule in characters split them
        ("Thank you for the information!",
         "You're welcome! If you have any other questions, feel free to ask.", "chat"),
        ("谢谢你的信息！", "不客气！如果你还有其他问题，随时可以问。", "chat"),
        ("Great, thanks for the help!",
         "You're welcome! If you have any other calculations or questions, feel free to ask.",
         "chat"),
        ("Oh, time flies! Thank you for the information.",
         "You're welcome! If you have any other questions, feel free to ask.", "chat"),
        ("是的，它是“无人生还”。谢谢您！", "不客气！如果你需要其他帮助，随时提问。", "chat"),
        # a refusal of an action is chat in English as in Chinese (~200 characters, ~55 tokens)
        ("Can you please order a pizza for me?",
         ("I'm sorry, but as an AI, I don't have the capability to perform external tasks such as "
          "ordering a pizza. My current function allows me to calculate the area of a shape."),
         "chat"),
        ("好的，谢谢！现在，你也能帮我更新一下我邮箱里的密码吗？",
         "很抱歉，作为一个AI，我无法执行更新您的邮箱密码等外部任务。我建议您手动更新以保证安全性。", "chat"),
        # a short factual answer is technical in Chinese as in English (43 characters)
        ("尼罗河究竟有多长？", "尼罗河的确切长度在专家之间存在争议，但普遍认为其长度约为6650公里（4132英里）。",
         "technical"),
        # thanks followed by a real question is answered as one
        ("Thanks! Why does water boil at a lower temperature at altitude?",
         "Air pressure is lower at altitude, so water molecules need less energy to escape. " * 2,
         "technical"),
    ],
)
def test_label_by_reply(request_text: str, reply: str, expected: str) -> None:
    assert label_by_reply(request_text, reply) == expected
