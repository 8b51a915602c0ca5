"""Signal patterns: bundled English and Chinese patterns, and their override."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml

from deerflow.agents.memory.backends.deermem.deermem import pipeline
from deerflow.agents.memory.backends.deermem.deermem.pipeline.signals import (
    SIGNAL_CLASSES,
    TRIVIAL_CLASS,
    SignalPatterns,
)

POSITIVE = [
    ("correction", "No, I meant the staging database."),
    ("correction", "no I meant Python 3.12"),
    ("correction", "That's wrong, the port is 5433."),
    ("correction", "that is not what I asked for"),
    ("correction", "Actually, we deploy on Fridays."),
    ("correction", "Thanks. Actually the repo moved to GitLab."),
    ("correction", "Don't use npm, use pnpm."),
    ("correction", "do not use unittest here, we use pytest instead"),
    ("correction", "Use httpx instead of requests."),
    ("correction", "You misunderstood the question."),
    ("correction", "As I told you, the budget is fixed."),
    ("correction", "不对，应该是 3.11"),
    ("correction", "我说的是测试环境"),
    ("correction", "错了，端口是 5433"),
    ("correction", "你理解错了"),
    ("correction", "别用 npm，用 pnpm"),
    ("correction", "应该用 pytest，不是 unittest"),
    ("correction", "其实我们不用 Docker"),
    ("reinforcement", "Exactly!"),
    ("reinforcement", "Yes, that's right."),
    ("reinforcement", "yes exactly"),
    ("reinforcement", "Perfect, that works."),
    ("reinforcement", "Perfect, thanks!"),
    ("reinforcement", "That's exactly what I needed."),
    ("reinforcement", "Great job on the refactor"),
    ("reinforcement", "You're absolutely right"),
    ("reinforcement", "对，就是这样"),
    ("reinforcement", "对"),
    ("reinforcement", "没错"),
    ("reinforcement", "你说得对"),
    ("reinforcement", "完美！"),
    ("reinforcement", "正是我想要的"),
    ("preference", "I prefer tabs over spaces."),
    ("preference", "I really like type hints."),
    ("preference", "I'd rather use Postgres."),
    ("preference", "I always use uv for Python projects."),
    ("preference", "I don't like long answers."),
    ("preference", "My favorite editor is Helix."),
    ("preference", "Please always answer in English."),
    ("preference", "我喜欢简洁的回答"),
    ("preference", "我更喜欢 Vim"),
    ("preference", "我习惯用 uv 管理依赖"),
    ("preference", "我一般用 Go 写后端"),
    ("preference", "我不喜欢太长的解释"),
    ("identity", "I am a data scientist."),
    ("identity", "I'm an SRE at a bank."),
    ("identity", "My name is Lin."),
    ("identity", "I work as a nurse."),
    ("identity", "I work at Acme Corp."),
    ("identity", "I'm based in Berlin."),
    ("identity", "I'm the maintainer of this library."),
    ("identity", "我是后端工程师"),
    ("identity", "我叫王伟"),
    ("identity", "我在字节跳动工作"),
    ("identity", "我来自成都"),
    ("identity", "我的专业是生物信息学"),
    ("goal", "I want to learn Rust this year."),
    ("goal", "I'm trying to cut our cloud bill."),
    ("goal", "My goal is to run a marathon."),
    ("goal", "my long-term goal is to become a staff engineer"),
    ("goal", "I plan to migrate to Kubernetes."),
    ("goal", "I'd like to get better at SQL."),
    ("goal", "我想学 Rust"),
    ("goal", "我的目标是年底前上线"),
    ("goal", "我打算明年换工作"),
    ("goal", "我正在准备考研"),
    ("decision", "Let's go with FastAPI."),
    ("decision", "We decided to drop Python 3.9."),
    ("decision", "I'll use SQLite for now."),
    ("decision", "We're going with option B."),
    ("decision", "Final decision: monorepo."),
    ("decision", "我们决定用 Postgres"),
    ("decision", "就用 Redis 吧"),
    ("decision", "就这么定了"),
    ("decision", "最终方案是微服务"),
]

NEGATIVE = [
    ("correction", "I meant to ask about caching."),
    ("correction", "I actually enjoyed that book."),
    ("correction", "Is that right?"),
    ("correction", "Use pnpm to install it."),
    ("correction", "这是一个不对称加密算法"),
    ("correction", "对不对？"),
    ("correction", "没错了"),
    ("correction", "还不错了"),
    ("correction", "这个方向不对劲"),
    ("reinforcement", "I need exactly 3 items."),
    ("reinforcement", "That's not right."),
    ("reinforcement", "Is this correct?"),
    ("reinforcement", "我们面对的问题很复杂"),
    ("reinforcement", "对于这个问题，你怎么看"),
    ("reinforcement", "代码没错误"),
    ("reinforcement", "不对"),
    ("preference", "I'd like you to summarise this."),
    ("preference", "Does it look like a bug?"),
    ("preference", "Which one do you prefer?"),
    ("preference", "帮我写一个排序函数"),
    ("identity", "I'm a bit lost here."),
    ("identity", "I'm a big fan of Rust."),
    ("identity", "I am a little confused."),
    ("identity", "Call me back later."),
    ("identity", "我是说第二个文件"),
    ("identity", "我是不是漏掉了什么"),
    ("identity", "我想问一下这个报错"),
    ("goal", "Do you want to see the logs?"),
    ("goal", "I'd like you to fix the test."),
    ("goal", "我想问一下部署流程"),
    ("goal", "让我想想"),
    ("goal", "我想知道为什么会超时"),
    ("decision", "Let's see what happens."),
    ("decision", "What would you use here?"),
    ("decision", "这是决定性的一步"),
    ("decision", "我还不确定"),
]

TRIVIAL = [
    "ok",
    "OK!",
    "okay.",
    "Okay, thanks!",
    "thanks",
    "Thank you so much!!",
    "thx",
    "got it",
    "Got it, thanks.",
    "  noted  ",
    "👍",
    "👍🏻👍🏻",
    "好的",
    "好的。",
    "好",
    "谢谢！",
    "谢谢你～",
    "好的，谢谢",
    "嗯",
    "嗯嗯。。。",
    "收到",
    "明白了",
]

NOT_TRIVIAL = [
    "ok, now add tests",
    "thanks, but use pnpm instead",
    "yes",
    "no",
    "perfect",
    "Perfect, thanks!",
    "okay so what about the cache?",
    "好的，再加一个测试",
    "谢谢，不过端口是 5433",
    "对",
    "",
    "!!!",
]


@pytest.fixture(scope="module")
def bundled() -> SignalPatterns:
    return SignalPatterns.load()


@pytest.mark.parametrize(("signal", "text"), POSITIVE)
def test_bundled_patterns_detect_the_signal(
    bundled: SignalPatterns, signal: str, text: str
) -> None:
    assert signal in bundled.detect([text])


@pytest.mark.parametrize(("signal", "text"), NEGATIVE)
def test_bundled_patterns_ignore_everyday_uses(
    bundled: SignalPatterns, signal: str, text: str
) -> None:
    assert signal not in bundled.detect([text])


def test_every_signal_class_has_examples_in_both_languages() -> None:
    def has_cjk(text: str) -> bool:
        return any("\u4e00" <= char <= "\u9fff" for char in text)

    for examples in (POSITIVE, NEGATIVE):
        for signal in SIGNAL_CLASSES:
            texts = [text for name, text in examples if name == signal]
            assert any(map(has_cjk, texts)), signal
            assert not all(map(has_cjk, texts)), signal


def test_detect_unions_the_classes_found_across_texts(bundled: SignalPatterns) -> None:
    found = bundled.detect(["I prefer uv.", "No, I meant the other file.", "我叫王伟"])
    assert found == {"preference", "correction", "identity"}
    assert bundled.detect([]) == frozenset()
    assert bundled.detect(["What time is it in Tokyo?"]) == frozenset()


@pytest.mark.parametrize("text", TRIVIAL)
def test_trivial_messages(bundled: SignalPatterns, text: str) -> None:
    assert bundled.is_trivial(text)


@pytest.mark.parametrize("text", NOT_TRIVIAL)
def test_messages_with_content_are_not_trivial(bundled: SignalPatterns, text: str) -> None:
    assert not bundled.is_trivial(text)


def test_bundled_patterns_are_loaded_once() -> None:
    assert SignalPatterns.load() is SignalPatterns.load()


def test_bundled_pattern_files_ship_as_package_data() -> None:
    directory = resources.files(pipeline) / "patterns"
    names = sorted(entry.name for entry in directory.iterdir() if entry.name.endswith(".yaml"))
    assert names == ["en.yaml", "zh.yaml"]
    for name in names:
        data = yaml.safe_load((directory / name).read_text(encoding="utf-8"))
        assert set(data) == {*SIGNAL_CLASSES, TRIVIAL_CLASS}, name
        assert all(data.values()), name


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_pattern_file_replaces_the_classes_it_names(tmp_path: Path) -> None:
    write(tmp_path / "p", "custom.yaml", "preference:\n  - '\\bmy editor is\\b'\n")
    patterns = SignalPatterns.load(tmp_path / "p")
    assert patterns.detect(["My editor is Helix"]) == {"preference"}
    assert patterns.detect(["I prefer tabs"]) == frozenset()
    # Classes the directory does not name keep the bundled patterns.
    assert patterns.detect(["No, I meant the other one"]) == {"correction"}
    assert patterns.is_trivial("thanks")


def test_files_naming_the_same_class_add_up(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    write(directory, "a.yaml", "decision:\n  - 'ship it'\n")
    write(directory, "b.yml", "decision:\n  - '拍板'\n")
    write(directory, "notes.txt", "not: [a pattern file\n")
    patterns = SignalPatterns.load(directory)
    assert patterns.detect(["OK, ship it"]) == {"decision"}
    assert patterns.detect(["老板拍板了"]) == {"decision"}
    assert patterns.detect(["Let's go with FastAPI"]) == frozenset()


def test_an_empty_list_turns_a_class_off(tmp_path: Path) -> None:
    write(tmp_path / "p", "quiet.yaml", "goal: []\ntrivial: []\n")
    patterns = SignalPatterns.load(tmp_path / "p")
    assert patterns.detect(["I want to learn Rust"]) == frozenset()
    assert not patterns.is_trivial("ok")


def test_trivial_patterns_can_be_overridden_and_must_match_whole(tmp_path: Path) -> None:
    write(tmp_path / "p", "trivial.yaml", "trivial:\n  - 'roger'\n")
    patterns = SignalPatterns.load(tmp_path / "p")
    assert patterns.is_trivial("Roger!")
    assert not patterns.is_trivial("roger that, deploy now")
    assert not patterns.is_trivial("ok")


def test_an_empty_pattern_file_changes_nothing(tmp_path: Path) -> None:
    write(tmp_path / "p", "empty.yaml", "# nothing yet\n")
    patterns = SignalPatterns.load(tmp_path / "p")
    assert patterns.signals == SignalPatterns.load().signals


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("correction: [\n", r"broken\.yaml.*not readable YAML"),
        ("- just\n- a list\n", r"broken\.yaml.*must map class names"),
        ("correction:\n  - 'ok'\n  - '(unclosed'\n", r"broken\.yaml.*'correction'.*'\(unclosed'"),
        ("identity:\n  - '[a-'\n", r"broken\.yaml.*'identity'.*invalid regex"),
        ("opinion:\n  - 'i think'\n", r"broken\.yaml.*'opinion'.*unknown class"),
        ("goal: 'i want to'\n", r"broken\.yaml.*'goal'.*list of non-empty regex"),
        ("goal:\n  - ''\n", r"broken\.yaml.*'goal'.*list of non-empty regex"),
        ("goal:\n  - 42\n", r"broken\.yaml.*'goal'.*list of non-empty regex"),
    ],
)
def test_a_bad_pattern_file_is_a_value_error_naming_file_and_class(
    tmp_path: Path, text: str, expected: str
) -> None:
    write(tmp_path / "p", "broken.yaml", text)
    with pytest.raises(ValueError, match=expected):
        SignalPatterns.load(tmp_path / "p")


def test_patterns_dir_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a directory"):
        SignalPatterns.load(tmp_path / "missing")
    with pytest.raises(ValueError, match="not a directory"):
        SignalPatterns.load(write(tmp_path, "file.yaml", "goal: []\n"))
