"""Labelling a text request by the reply it calls for (not by its source or its topic).

Pure. Used by the corpus builder for sources that mix kinds of request (chatterbot's "ai"
scripts hold "What is AI?", IFBench holds proofs as well as poems, BFCL's irrelevance rows are
chit-chat or questions with tools attached). The rules follow the labelling guide in the notes:
code when the reply is mostly code, prose for creative/open-ended writing, technical for
explanations (short is not casual), chat for greetings, thanks, small talk and questions to the
assistant about itself. `default` decides what the rules leave open.
"""

from __future__ import annotations

import re
from typing import Final

_CODE_ASK: Final = re.compile(
    r"\b(write|implement|code|fix|refactor|complete|convert|generate|create|rewrite|optimi[sz]e|"
    r"debug|make|build|add)\b[^.?!\n]{0,50}\b(function|class|code|script|program|method|query|"
    r"sql|regex|regular expression|unit tests?|tests|yaml|dockerfile|makefile|snippet|resolver|"
    r"endpoint|component|parser|algorithm|decorator|interface|deployment|cron job|lambda|"
    r"(stack|queue|heap|trie|tree|linked list|hash table|graph) (class|implementation)?)\b|"
    r"\b(write|implement|code|make|build|create|do|show)\b[^.?!\n]{0,40}\b(in|using|with) "
    r"(python|javascript|typescript|java|go|golang|rust|c\+\+|c#|ruby|php|kotlin|swift|sql|"
    r"bash|shell|haskell|scala|r|matlab|html|css|react|flask|django|node(\.js)?|aws)\b|"
    r"(写|实现|编写|生成|修改|补全|重构)[^。？！\n]{0,12}(函数|代码|程序|脚本|类|SQL|sql|正则|"
    r"单元测试|接口|配置文件)",
    re.IGNORECASE,
)
_SHORT_WRITE: Final = re.compile(
    r"^\s*(can you |could you |please )?(write|code|implement)\b", re.IGNORECASE)
_TECH_PROBLEM: Final = re.compile(
    r"\b(is not|isn't|won't|doesn't|does not|can't|cannot|couldn't|not working|stopped working|"
    r"keeps crashing|crash(es|ed)?|error|exception|traceback|broken|overheating|flickering|"
    r"not detected|forgot my password|fails?|failed)\b|(报错|错误|失败|无法|不能|异常|崩溃)",
    re.IGNORECASE,
)
_PROSE_ASK: Final = re.compile(
    r"\b(write|draft|compose|craft|create|generate|rewrite|paraphrase|rephrase|tell|make up|"
    r"come up with|give me|brainstorm|pen|imagine|continue)\b[^.?!\n]{0,40}"
    r"\b(stor(y|ies)|poems?|poetry|haiku|lyrics|song|essay|novel|fable|limerick|sonnet|"
    r"screenplay|rap|ode|tale|fiction|blog( post)?|tweet|slogans?|taglines?|advertisement|"
    r"ad copy|marketing|speech|toast|eulogy|riddle|dialogue|narrative|diary|memoir|script|"
    r"letter|email|e-mail|post|article|paragraph|description|review|bio|message|note|"
    r"invitation|announcement|outline|proposal|pitch|names for|title for|caption|copy|"
    r"answer on my behalf|response on my behalf|limericks|chapter|scene)\b|"
    r"\b(role-?play|pretend (you are|to be)|act as)\b|"
    r"(写|创作|编|讲|来|分享|讲述)[^。？！\n]{0,24}(故事|诗|散文|作文|小说|歌词|文案|剧本|演讲稿|童话|对联|"
    r"口号|广告词|情书|祝福语|信|邮件|文章|段子)|续写|改写|润色|仿写",
    re.IGNORECASE,
)
_EXPLAIN_ASK: Final = re.compile(
    r"\b(what|how|why|when|where|which|who|explain|describe|define|definition|difference|"
    r"compare|summari[sz]e|list|calculate|compute|solve|prove|derive|estimate|analy[sz]e|analysis|"
    r"tell me about|is it true|does|do|python|javascript|typescript|java|sql|linux|api|"
    r"server|database|docker|kubernetes)\b|"
    r"(什么|为什么|如何|怎么|怎样|解释|区别|原理|哪些|哪个|多少|是否|吗[？?]|介绍|分析|总结|计算|"
    r"证明|报错|错误|问题|失败|无法|不能|请问)",
    re.IGNORECASE,
)
_ABOUT_ASSISTANT: Final = re.compile(
    r"\b(are|were|do|did|have) you\b|\byour\b|\byourself\b|\bur\b|"
    r"^\s*you\b|(你是|你叫|你喜欢|你会|你能|你有|你的|你觉得|你在|你好吗|你多大|你怎么样)",
    re.IGNORECASE,
)
_ASKS_FOR_EXPLANATION: Final = re.compile(
    r"\b(explain|teach|show me how|tell me (about|how|what|why)|how (does|do|to|can|is|are) "
    r"(?!you\b)|what (is|are) (a|an|the) )|(解释|介绍一下|原理|什么是)",
    re.IGNORECASE,
)
_CHAT_TURN: Final = re.compile(
    r"^\s*(hi|hello|hey|yo|hiya|howdy|thanks|thank you|thx|ty|good (morning|night|evening|"
    r"afternoon)|how are you|how'?s it going|what'?s up|sup|bye|goodbye|see you|ok|okay|cool|"
    r"great|nice|lol|haha|wow|sure|yes|no|yeah|nope|sorry|awesome|me too|same|i see|"
    r"tell me a joke|讲个笑话|"
    r"你好|您好|谢谢|多谢|早上好|晚上好|晚安|再见|拜拜|哈哈|嗯|好的|没事|不客气|对不起)(?![a-z])",
    re.IGNORECASE,
)
_THANKS: Final = re.compile(r"\b(thanks|thank you|thx|appreciate it)\b|谢谢|多谢|感谢", re.IGNORECASE)


def label_text(text: str, default: str) -> str:
    """The class of a text-only request from what its last user turn asks for."""
    head = text.strip()[:1500]
    if _CODE_ASK.search(head):
        return "code"
    if _PROSE_ASK.search(head):
        return "prose"
    if len(head) < 60 and _SHORT_WRITE.search(head):
        return "code"  # "can you write insertion sort?": a short write-ask that is not prose
    if _TECH_PROBLEM.search(head) and not _asks_about_assistant(head):
        return "technical"
    if _is_casual(head):
        return "chat"
    if _EXPLAIN_ASK.search(head) and len(head) > 5:
        return "technical"
    return default


def _is_casual(text: str) -> bool:
    if _ASKS_FOR_EXPLANATION.search(text):
        return False
    opener = _CHAT_TURN.search(text)
    if opener and len(text) <= 80:
        # "hello, how do I run it on a CPU?" calls for the answer, not for a greeting back
        return not _asks_about_a_subject(text[opener.end():])
    return _asks_about_assistant(text)


def is_pleasantry(text: str) -> bool:
    """Thanks, a greeting or an acknowledgement that asks nothing more ("Thank you for the
    information!", "Oh, time flies! Thanks.", "好的，谢谢你！"): its natural reply is a short one in
    kind."""
    head = text.strip()
    if len(head) > 120 or "?" in head or "？" in head or _ASKS_FOR_EXPLANATION.search(head):
        return False
    opener = _CHAT_TURN.search(head)
    if opener is not None:
        return not _asks_about_a_subject(head[opener.end():])
    return bool(_THANKS.search(head))


def _asks_about_assistant(text: str) -> bool:
    """A question to the assistant about itself: short, and not a problem report that happens
    to quote "your" ("请输入你的问题" in a pasted log is not a question to the assistant)."""
    if not _ABOUT_ASSISTANT.search(text) or len(text) > 120:
        return False
    return not (_TECH_PROBLEM.search(text) and len(text) > 60)


def _asks_about_a_subject(rest: str) -> bool:
    rest = rest.strip(" ,，.。!！~、")
    return (len(rest) > 6 and not _ABOUT_ASSISTANT.search(rest)
            and bool(_EXPLAIN_ASK.search(rest) or _TECH_PROBLEM.search(rest)))
