"""The closed word lists of the paraphrase gate (`paraphrase`): which words a fact's meaning turns
on, which are one word said two ways, and which closed classes of values two facts must agree on.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "COMPARISON",
    "CONVERSES",
    "NUMBERS",
    "POLARITY",
    "PREFERS",
    "RELATIONS",
    "SPELLINGS",
    "SUBJECT",
    "VALUE_CLASSES",
]

SUBJECT: Final = frozenset({"user", "users"})

# Words that turn a fact around; "t" is what is left of "don't" and "can't".
_POLARITY_WORDS: Final = """
    not no never cannot t nobody nothing none neither dislike dislikes disliked hate hates hated
    used formerly former previously stopped quit
"""
POLARITY: Final = frozenset(_POLARITY_WORDS.split())

_NUMBER_WORDS: Final = "zero one two three four five six seven eight nine ten eleven twelve"
NUMBERS: Final = {word: str(value) for value, word in enumerate(_NUMBER_WORDS.split())}

# Closed classes of values, like numbers: two facts that each name one the other lacks differ.
VALUE_CLASSES: Final = (
    "monday tuesday wednesday thursday friday saturday sunday",
    "january february march april may june july august september october november december",
    "spring summer autumn fall winter",
    "red orange yellow green blue purple pink brown black white grey gray",
)

# The people of a user's life, named by their relation to the user: a closed class of values
# ("Daughter plays football" / "Son plays football"). Words that may name either of two of them
# (child, parent, sibling, family) are left out: "Has two children" is "Is a parent of two kids".
RELATIONS: Final = """
    mother father son daughter sister brother wife husband partner girlfriend boyfriend fiance
    fiancee grandmother grandfather grandson granddaughter aunt uncle niece nephew cousin
    manager boss colleague supervisor teammate mentor landlord tenant neighbour neighbor
    roommate flatmate friend
"""

# Verbs that say the same deal from its other side, or its undoing: a fact with one and a fact
# with the other ("Lends money to friends" / "Borrows money from friends") are two facts, though
# the model puts some pairs close (lends / borrows 0.87). Each pair is a closed class of two.
CONVERSES: Final = (
    "give receive",
    "send receive",
    "lend borrow",
    "buy sell",
    "rent own",
    "teach learn",
    "win lose",
    "join leave",
    "arrive depart",
)

# Words that put a fact's values in an order: "X over Y", "X rather than Y", "X instead of Y".
COMPARISON: Final = frozenset({"over", "than", "instead"})

# The verbs a preference is stated with: "prefers tabs" and "likes tabs" are one fact.
_PREFER_WORDS: Final = """
    prefer prefers preferred like likes liked choose chooses chose pick picks picked favor favors
    favour favours
"""
PREFERS: Final = frozenset(_PREFER_WORDS.split())

# One word said two ways: spellings, familiar names of relatives, "called" for "named".
_SAID_TWO_WAYS: Final = {
    "gray": "grey",
    "autumn": "fall",
    "mom": "mother",
    "mum": "mother",
    "dad": "father",
    "grandma": "grandmother",
    "granny": "grandmother",
    "grandpa": "grandfather",
    "wives": "wife",
    "coworker": "colleague",
    "coworkers": "colleague",
    "called": "named",
}

# Irregular verbs, whose forms the stemmer leaves apart ("wrote", "written" / "writes"): each
# line is the verb, then its other forms ("saw" is left out: it is also a tool).
_IRREGULAR_VERBS: Final = """
    begin began begun
    bring brought
    build built
    buy bought
    drive drove driven
    eat ate eaten
    fly flew flown
    get got gotten
    give gave given
    go went gone
    grow grew grown
    keep kept
    learn learnt
    leave left
    lend lent
    lose lost
    make made
    meet met
    pay paid
    ride rode ridden
    run ran
    see seen
    sell sold
    send sent
    speak spoke spoken
    spend spent
    swim swam swum
    take took taken
    teach taught
    think thought
    win won
    write wrote written
"""
SPELLINGS: Final = _SAID_TWO_WAYS | {
    form: verb
    for verb, *forms in map(str.split, _IRREGULAR_VERBS.strip().splitlines())
    for form in forms
}
"""The word each of these stands for; other words stand for themselves."""
