"""Synthetic seeds: requests written for this project where no real data exists.

Pure. Templates times slot lists, all tagged `synthetic` (family "synthetic/<kind>"), so that
evaluation can be reported on real rows alone. They cover the notes' gaps: Chinese code,
technical and writing requests, Chinese agent turns, clean technical explanations in English.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import product
from typing import Any, Final

from classifiers.training.data.harness import FILE_TOOLS
from classifiers.training.data.rows import Row, chat, pick, system, user

_ZH_CODE_TASKS: Final = (
    "判断一个字符串是否是回文", "计算斐波那契数列的第n项", "合并两个有序链表", "实现快速排序",
    "读取CSV文件并统计每列的平均值", "解析URL中的查询参数", "实现一个LRU缓存", "找出数组中的重复元素",
    "把JSON文件转换成YAML", "实现二分查找", "统计文本中每个单词出现的次数", "校验邮箱地址格式",
    "实现一个简单的HTTP服务器", "计算两个日期之间相差的天数", "生成随机密码", "反转单链表",
    "实现栈和队列", "按用户年龄分组并计数的SQL查询", "递归遍历目录并列出所有文件", "实现矩阵乘法",
)
_ZH_CODE_FORMS: Final = (
    "用{lang}写一个函数，{task}。", "请帮我实现：{task}（用{lang}）。", "写一段{lang}代码{task}，并附上单元测试。",
    "用{lang}实现{task}，只给代码。", "创建一个{lang}函数，该函数可以{task}。", "生成一段{lang}代码，用于{task}。",
    "给我{lang}的代码：{task}", "能不能写个{lang}脚本{task}？",
    # asked as a how-to whose answer is a program
    "如何用{lang}{task}？请给出完整代码。", "我想用{lang}{task}，代码应该怎么写？",
    "{lang}里怎么{task}？给个示例代码。", "请用{lang}{task}，写出实现并简单注释。",
)
# Code asks that are not "write function X": queries, configs, markup, fixes and conversions.
_ZH_CODE_ASKS: Final = (
    "有一张orders表，字段是user_id、amount、created_at，怎么查出每个用户最近一笔订单？写SQL。",
    "帮我写个SQL，统计每个月的新注册用户数。", "MySQL里如何查询重复的手机号？请给出语句。",
    "用SQL找出每个班级成绩前三名的学生。", "写一个nginx配置，把80端口的请求转发到本机8080。",
    "给我一个docker-compose.yml，包含postgres和redis两个服务。", "写个crontab，每天凌晨两点执行备份脚本。",
    "帮我写一个GitHub Actions工作流，推送到main时运行pytest。", "写一个正则表达式匹配中国大陆的手机号。",
    "在LaTeX里怎么画一个三行三列的表格？给出代码。", "用HTML和CSS做一个居中的登录框。",
    "写一个Makefile，编译src目录下所有的.c文件。", "用bash写个脚本，把当前目录下所有.txt文件合并成一个。",
    "用shell统计日志文件里每个IP出现的次数，按次数排序。", "写一个Kubernetes Deployment，副本数为3，镜像是nginx:1.25。",
    "下面这段Python代码报错了，帮我改一下：\n```python\nfor i in range(10)\n    print(i)\n```",
    "把这段JavaScript改成TypeScript，加上类型：\n```js\nfunction add(a, b) { return a + b }\n```",
    "这个Go函数有并发问题，怎么改？\n```go\nvar n int\nfunc inc() { n++ }\n```",
    "请把下面的Python 2代码改成Python 3：\n```python\nprint \"hello\"\n```",
    "用pandas把两个DataFrame按id合并，缺失值填0，怎么写？", "用React写一个计数器组件。",
    "我想在Vue里监听窗口大小变化，代码怎么写？", "用Java实现一个单例模式，要线程安全。",
    "写一个Python装饰器，统计函数的运行时间。", "能帮我写个爬虫，抓取网页标题吗？用requests和BeautifulSoup。",
    "把这个列表按字典的age字段排序，Python怎么写？", "用C语言实现字符串反转，不要用库函数。",
    "写一个Flask接口，接收JSON并返回字段数量。", "帮我用matplotlib画一个柱状图，数据是各月销售额。",
    "给这个函数写单元测试：\n```python\ndef is_even(n):\n    return n % 2 == 0\n```",
    "我的程序需要读取YAML配置文件，用Python怎么实现？请给代码。",
    "如何用Excel公式计算某一列中大于100的数的个数？", "写一个PowerShell脚本，列出占用空间最大的10个文件。",
)
_LANGS: Final = ("Python", "Go", "Java", "JavaScript", "Rust", "C++")

_ZH_CONCEPTS: Final = (
    "量子计算", "区块链", "机器学习中的过拟合", "TCP三次握手", "HTTPS的加密过程", "数据库索引",
    "Transformer模型", "梯度下降", "操作系统的虚拟内存", "光合作用", "通货膨胀", "相对论",
    "哈希表", "微服务架构", "CAP定理", "注意力机制", "Docker容器", "垃圾回收", "进程和线程",
    "RESTful API", "推测解码", "KV缓存", "负载均衡", "熵", "黑洞",
)
_ZH_TECH_FORMS: Final = (
    "什么是{c}？", "请解释一下{c}的原理。", "{c}是怎么工作的？", "能简单介绍一下{c}吗？",
    "{c}有哪些优缺点？", "为什么需要{c}？",
)
_ZH_PROSE_TOPICS: Final = (
    "秋天", "故乡", "大海", "友情", "月亮", "春节", "城市的夜晚", "一只流浪猫", "毕业", "雨天",
    "母亲", "星空", "咖啡馆", "旅行", "时间",
)
_ZH_PROSE_FORMS: Final = (
    "写一首关于{t}的诗。", "以“{t}”为题写一篇800字的散文。", "写一个关于{t}的短篇故事。",
    "为{t}主题写一段广告文案。", "帮我写一封关于{t}的信给朋友。",
)
_ZH_CHAT: Final = (
    "你好呀", "在吗？", "今天好累啊", "哈哈哈太好笑了", "早安！", "你今天过得怎么样？", "我好无聊",
    "晚安啦", "你叫什么名字？", "周末快乐！", "我刚吃完饭", "你喜欢猫还是狗？", "好久不见",
    "最近怎么样", "今天天气真好啊", "嗯嗯", "你真聪明", "我有点难过", "讲个笑话吧", "你是机器人吗？",
    "谢谢你的帮助！", "太感谢了", "好的，明白了", "辛苦啦", "你好，很高兴认识你", "下午好",
    "我今天升职了！", "明天就放假了，好开心", "你会不会觉得累？", "你有朋友吗？", "你几岁了？",
    "你喜欢什么颜色？", "你平时都做什么？", "我想找人聊聊天", "今天下雨了，有点烦", "哈哈，你真逗",
    "没事，随便聊聊", "我失眠了", "刚下班，好饿", "你觉得我今天穿什么好呢？", "嘿嘿", "拜拜，明天见",
    "早点休息哦", "你会唱歌吗？", "我的猫今天特别乖", "今天是我生日！", "好无聊啊，陪我聊会儿吧",
    "你是谁开发的？", "你喜欢看电影吗？", "我们来聊点开心的事吧", "你觉得周末去哪玩好？", "好吧",
    "哇，厉害", "真的吗？", "我也是这么想的", "有道理", "不好意思，刚才走开了", "中午吃什么好呢",
)
_ZH_AGENT: Final = (
    ("帮我查一下北京明天的天气", "get_weather", "city"),
    ("把会议改到下午三点", "update_event", "time"),
    ("给张三发一封邮件，说我明天请假", "send_email", "to"),
    ("查询订单 20240312 的物流状态", "track_order", "order_id"),
    ("帮我订一张明天去上海的高铁票", "book_train", "destination"),
    ("把这首歌加到我的收藏列表", "add_to_playlist", "song"),
    ("提醒我晚上八点吃药", "create_reminder", "time"),
    ("搜索一下最近的咖啡店", "search_places", "query"),
)
_ZH_AGENT_CODING: Final = (
    "修复 tests/test_api.py 里失败的测试", "给 utils.py 里的函数加上类型注解", "把配置从 JSON 改成 YAML",
    "在 README 里补充安装说明", "重构 server.py，把路由拆到单独的模块", "找出项目里所有未使用的导入并删除",
)
_EN_CODE_TASKS: Final = (
    "a binary search", "a function that reverses a linked list", "an LRU cache",
    "a CSV parser", "a retry decorator with exponential backoff", "a rate limiter",
    "a function to validate email addresses", "a trie", "merge sort",
    "a REST endpoint that returns the current user", "a unit test for the login handler",
    "a script that renames all .jpeg files to .jpg", "a SQL query that finds duplicate emails",
    "a Dockerfile for a Flask app", "a regex that matches ISO dates", "a class for a bank account",
    "a function that flattens a nested list", "a thread-safe counter",
)
_EN_CODE_FORMS: Final = (
    "write {task} in {lang}", "can you write {task} in {lang}?", "Implement {task} in {lang}.",
    "Give me {task} in {lang}, code only.", "I need {task} ({lang}). Just the code please.",
    "can you write {task}?", "write {task}",
)
_EN_PROSE_TOPICS: Final = (
    "autumn", "a lighthouse keeper", "the first day of school",
    "a lost dog finding its way home", "the ocean at night", "a robot learning to paint", "friendship", "a rainy Monday",
    "moving to a new city", "my grandmother's kitchen", "a dragon who is afraid of fire",
    "coffee", "the last train home", "spring", "a small bakery",
)
_EN_PROSE_FORMS: Final = (
    "Write a poem about {t}.", "write a short story about {t}", "Write a haiku about {t}.",
    "Can you write song lyrics about {t}?", "Write a 500-word essay on {t}.",
    "Draft a product description for a candle inspired by {t}.",
)
_EN_CONCEPTS: Final = (
    "speculative decoding", "the TCP three-way handshake", "gradient descent", "a hash table",
    "virtual memory", "public-key cryptography", "the CAP theorem", "garbage collection",
    "a B-tree index", "the attention mechanism", "photosynthesis", "inflation", "black holes",
    "DNS resolution", "eventual consistency", "a KV cache in LLM inference", "Docker images",
    "the difference between processes and threads", "Bayes' theorem", "entropy",
)
_EN_TECH_FORMS: Final = (
    "Explain {c}.", "How does {c} work?", "Can you give me an overview of {c}?",
    "What are the trade-offs of {c}?", "Explain {c} to a new engineer, step by step.",
)


def _row(kind: str, i: int, label: str, lang: str, body: dict[str, Any]) -> Row:
    return Row(id=f"synthetic/{kind}/{i}", source="synthetic", family=f"synthetic/{kind}",
               provenance="synthetic", label=label, lang=lang, request=body)


def _fill(forms: Sequence[str], **slots: Sequence[str]) -> list[str]:
    keys = list(slots)
    return [form.format(**dict(zip(keys, values)))
            for form, values in product(forms, product(*(slots[k] for k in keys)))]


def seeds(per_kind: int = 160) -> list[Row]:
    rows: list[Row] = []
    kinds: list[tuple[str, str, str, list[str]]] = [
        ("zh_code", "code", "zh", _fill(_ZH_CODE_FORMS, lang=_LANGS, task=_ZH_CODE_TASKS)),
        ("zh_code_asks", "code", "zh", list(_ZH_CODE_ASKS)),
        ("zh_technical", "technical", "zh", _fill(_ZH_TECH_FORMS, c=_ZH_CONCEPTS)),
        ("zh_prose", "prose", "zh", _fill(_ZH_PROSE_FORMS, t=_ZH_PROSE_TOPICS)),
        ("zh_chat", "chat", "zh", list(_ZH_CHAT)),
        ("en_code", "code", "en", _fill(_EN_CODE_FORMS, lang=_LANGS, task=_EN_CODE_TASKS)),
        ("en_prose", "prose", "en", _fill(_EN_PROSE_FORMS, t=_EN_PROSE_TOPICS)),
        ("en_technical", "technical", "en", _fill(_EN_TECH_FORMS, c=_EN_CONCEPTS)),
    ]
    for kind, label, lang, texts in kinds:
        # Chinese code asks have the fewest real rows and the most varied phrasing: twice the share
        count = 2 * per_kind if kind == "zh_code" else per_kind
        for i, text in enumerate(pick(texts, count, kind)):
            rows.append(_row(kind, i, label, lang, chat([user(text)])))
    for i, (text, name, param) in enumerate(_ZH_AGENT):
        tool = {"type": "function", "function": {
            "name": name, "description": f"{name} tool",
            "parameters": {"type": "object", "properties": {param: {"type": "string"}},
                           "required": [param]}}}
        rows.append(_row("zh_agent", i, "agent", "zh", chat([user(text)], tools=[tool])))
    for i, text in enumerate(_ZH_AGENT_CODING):
        body = chat([system("你是一个编程助手，可以使用工具读写文件和运行命令。"), user(text)],
                    tools=FILE_TOOLS)
        rows.append(_row("zh_agent_coding", i, "agent", "zh", body))
    return rows
