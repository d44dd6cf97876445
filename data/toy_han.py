"""The lexicon of the toy language's target written in Chinese characters (``data.toy``, ``script="han"``).

Every source word of the toy language maps to a real Chinese word of one or two characters (a few are the
nearest word of that length: ``baker`` is 厨师, a cook). Chinese nouns have no plural, so ``cat`` and
``cats`` are both 猫; each noun brings the measure word (classifier) that Chinese puts between a numeral or
demonstrative and that noun (只 for animals, 本 for books, 张 for tables, 个 for most others). The word order
and which target word links to which source word are in ``data.toy``; this module holds only the words.
"""

# fmt: off
# source noun (singular) -> (Chinese noun, its measure word)
NOUNS: dict[str, tuple[str, str]] = {
    "cat": ("猫", "只"), "dog": ("狗", "只"), "bird": ("鸟", "只"), "horse": ("马", "匹"),
    "mouse": ("老鼠", "只"), "child": ("孩子", "个"), "man": ("男人", "个"), "woman": ("女人", "个"),
    "teacher": ("老师", "位"), "farmer": ("农民", "个"), "king": ("国王", "位"), "queen": ("王后", "位"),
    "doctor": ("医生", "位"), "student": ("学生", "个"), "girl": ("女孩", "个"), "boy": ("男孩", "个"),
    "friend": ("朋友", "个"), "baker": ("厨师", "个"), "sailor": ("水手", "个"), "soldier": ("士兵", "名"),
    "table": ("桌子", "张"), "chair": ("椅子", "把"), "house": ("房子", "座"), "garden": ("花园", "个"),
    "river": ("河", "条"), "tree": ("树", "棵"), "car": ("车", "辆"), "boat": ("船", "条"),
    "book": ("书", "本"), "letter": ("信", "封"), "apple": ("苹果", "个"), "cake": ("蛋糕", "块"),
    "ball": ("球", "个"), "box": ("盒子", "个"), "door": ("门", "扇"), "window": ("窗户", "扇"),
    "city": ("城市", "座"), "village": ("村子", "个"), "hill": ("山丘", "座"), "bridge": ("桥", "座"),
}
ADJECTIVES: dict[str, str] = {
    "big": "大", "small": "小", "red": "红", "blue": "蓝", "green": "绿", "old": "老", "young": "年轻",
    "happy": "快乐", "sad": "伤心", "tall": "高", "quick": "快", "slow": "慢", "quiet": "安静",
    "loud": "吵闹", "brave": "勇敢", "clever": "聪明", "lazy": "懒", "hungry": "饥饿", "angry": "生气",
    "gentle": "温柔", "strange": "奇怪", "bright": "明亮", "dark": "黑暗", "white": "白", "black": "黑",
    "yellow": "黄", "heavy": "重", "soft": "软", "cold": "冷", "warm": "温暖",
}
VERBS: dict[str, str] = {
    # transitive
    "saw": "看见", "liked": "喜欢", "chased": "追赶", "found": "找到", "followed": "跟随", "helped": "帮助",
    "visited": "拜访", "painted": "涂", "carried": "搬", "watched": "看", "called": "叫", "pushed": "推",
    "heard": "听见", "fed": "喂", "met": "遇见", "knew": "认识", "loved": "爱", "feared": "害怕",
    "taught": "教", "drew": "画", "caught": "抓住", "washed": "洗",
    # intransitive
    "slept": "睡觉", "ran": "跑", "sang": "唱歌", "danced": "跳舞", "laughed": "笑", "waited": "等",
    "smiled": "微笑", "cried": "哭", "jumped": "跳", "swam": "游泳", "arrived": "到达",
}
# Verbs of a state, which take no aspect particle (喜欢 "like", not 喜欢了).
STATIVE_VERBS: frozenset[str] = frozenset({"liked", "knew", "loved", "feared"})
# source determiner -> (Chinese word alone or None, the word before a numeral or None, a measure word follows)
# "the" has no Chinese word: a bare noun is definite. "these two cats" is 这两只猫, not 这些两只猫.
DETERMINERS: dict[str, tuple[str | None, str | None, bool]] = {
    "the": (None, None, False),
    "a": ("一", None, True),
    "this": ("这", None, True),
    "every": ("每", None, True),
    "these": ("这些", "这", False),
    "some": ("一些", None, False),
}
NUMERALS: dict[str, str] = {
    "two": "两", "three": "三", "four": "四", "five": "五", "six": "六", "seven": "七", "eight": "八",
    "nine": "九", "ten": "十", "eleven": "十一", "twelve": "十二",
}
# source preposition -> (the word before its noun phrase, the localizer after it or None): 在桌子下 "under the
# table", 和狗一起 "with the dog"
PREPOSITIONS: dict[str, tuple[str, str | None]] = {
    "in": ("在", "里"), "on": ("在", "上"), "near": ("在", "附近"), "under": ("在", "下"),
    "behind": ("在", "后面"), "beside": ("在", "旁边"), "with": ("和", "一起"), "without": ("不带", None),
}
# fmt: on
CONJUNCTIONS: dict[str, str] = {"and": "而且", "but": "但是", "while": "同时"}
PERFECTIVE = "了"  # the aspect particle after a verb of action, linked to nothing
