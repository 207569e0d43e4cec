"""The generated tasks spoken to a chat model (trainer/tasks/chat_format.py): the same problems as
the char presets, asked in words through the model's chat template, scored on free text."""

import pytest

from trainer.tasks.arithmetic import ArithmeticTask, question_text, score_problem_text
from trainer.tasks.base import Problem
from trainer.tasks.chat_format import ChatFormat, final_number
from trainer.tasks.countdown import CountdownTask, final_expression
from trainer.tasks.countdown import question_text as countdown_question
from trainer.tasks.countdown import score_problem_text as countdown_score


@pytest.mark.parametrize("text, want", [
    ("12", 12), (" **42**.", 42), ("1,234", 1234), ("-7", -7),
    ("The answer is 122. To calculate 53 + 69, you would add 53", 122),  # not the last number written
    ("The answer is 2, because 0 + 1 is simply zero.", 2),  # the claimed answer, not the restated operand
    ("17 + 75 = 22.", 22), ("Answer: 9", 9), ("The answer, as it is, is 1.", 1),
    ("Here's a possible answer: 0 + 0 = 0\n\nIn a traditional arithmetic operation, 0", 0),
    ("The number 0 + 1 is an identity", None),  # restating the question answers nothing
    ("zero and one, a cycle of 0 and 1", None), ("= 1.5", None), ("no digits", None), ("", None),
])
def test_final_number_is_the_answer_a_marker_introduces(text, want):
    assert final_number(text) == want


def test_arithmetic_in_words_and_its_free_text_verifier():
    p = Problem("37+85=", "122", "L2-add2")
    assert question_text(p) == "What is 37 + 85? Answer with just the number."
    assert question_text(Problem("12+34+56=", "102")) == "What is 12 + 34 + 56? Answer with just the number."
    assert score_problem_text("37 + 85 = 122", p) == 1.0
    assert score_problem_text("The answer is 121.", p) == 0.0
    assert score_problem_text("37 + 85", p) == 0.0


@pytest.mark.parametrize("text, want", [
    ("3*7+9", "3*7+9"), ("3 * 7 + 9 = 30", "3 * 7 + 9"), ("30 = 3*7+9.", "3*7+9"), ("3 × 7 + 9", "3 * 7 + 9"),
    ("The expression is (9 - 3) x 5", "(9 - 3) * 5"), ("30", None), ("no answer", None),
])
def test_final_expression_reads_the_last_equation(text, want):
    assert final_expression(text) == want


def test_countdown_in_words_and_its_free_text_verifier():
    p = Problem("3 7 9>30:", "3*7+9", "C3")
    q = countdown_question(p)
    assert "3, 7 and 9" in q and "equal to 30" in q
    assert countdown_score("Sure! 3 * 7 + 9 = 30", p) == 1.0
    assert countdown_score("9*3+7 = 30", p) == 0.0  # 34
    assert countdown_score("3*7+9+9 = 30", p) == 0.0  # 9 used twice (and 39)
    assert countdown_score("30", p) == 0.0


@pytest.fixture(scope="module")
def chat(tmp_path_factory, hf_tokenizer_builder):
    corpus = ["What is 37 + 85? Answer with just the number.", "Using the numbers write an expression equal to"]
    return ChatFormat(hf_tokenizer_builder(tmp_path_factory.mktemp("tok"), corpus))


@pytest.mark.parametrize("cls", [ArithmeticTask, CountdownTask])
def test_a_chat_task_has_the_char_tasks_problems_rendered_through_the_template(cls, chat):
    char, real = cls(benchmark_size=8), cls(benchmark_size=8, chat=chat)
    assert real.train_problems(0, 32, seed=3) == char.train_problems(0, 32, seed=3)
    assert real.benchmarks() == char.benchmarks()
    p = real.train_problems(0, 1, seed=3)[0]
    ids = real.encode_prompt(p)
    text = chat.hf.decode(ids)
    assert text == "<|im_start|>user\n" + real.question(p) + "<|im_end|>\n<|im_start|>assistant\n"
    assert real.tokenizer.eos_id == chat.hf.convert_tokens_to_ids("<|im_end|>")
    assert real.score(f"The answer is {p.answer}", p) == 1.0
    assert real.score(p.answer, p) == 1.0 and char.score(p.answer, p) == 1.0
    assert char.score(f"= {p.answer}", p) == 0.0  # the char presets keep their exact verifier
    with pytest.raises(ValueError, match="supervised targets"):
        real.answer_ids(p)


def test_a_tokenizer_without_a_chat_template_is_refused(tmp_path, hf_tokenizer_builder):
    hf = hf_tokenizer_builder(tmp_path, ["x"])
    hf.chat_template = None
    with pytest.raises(ValueError, match="chat template"):
        ChatFormat(hf)
