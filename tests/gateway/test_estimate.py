"""The documented input-token estimate (README, gateway/estimate.py)."""

from gateway.estimate import chat_input_tokens, max_output_tokens, responses_input_tokens


def test_four_characters_a_token_plus_message_overheads():
    body = {"messages": [{"role": "system", "content": "abcd" * 10},      # 10 tokens
                         {"role": "user", "content": [{"type": "text", "text": "abcde"}]}]}
    assert chat_input_tokens(body) == 10 + 2 + 2 * 4 + 3
    with_tools = {**body, "tools": [{"type": "function", "function": {"name": "f"}}]}
    assert chat_input_tokens(with_tools) > chat_input_tokens(body)
    assert responses_input_tokens({"input": "abcd" * 3}) == 3 + 3


def test_the_output_ceiling_comes_from_any_of_the_three_names():
    assert max_output_tokens({"max_tokens": 7}) == 7
    assert max_output_tokens({"max_completion_tokens": 9, "max_tokens": 7}) == 9
    assert max_output_tokens({"max_output_tokens": 5}) == 5
    assert max_output_tokens({"max_tokens": 0}) is None
    assert max_output_tokens({"max_tokens": True}) is None
