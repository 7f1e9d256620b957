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


def test_tool_call_arguments_and_tool_results_count_as_text():
    arguments = '{"query": "' + "x" * 3986 + '"}'  # 4,000 characters: 1,000 tokens
    plain = {"messages": [{"role": "user", "content": "hi"}]}
    with_call = {"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "y" * 2000}]}
    assert chat_input_tokens(with_call) - chat_input_tokens(plain) == 1000 + 500 + 2 * 4


def test_responses_function_call_items_count_their_name_arguments_and_output():
    body = {"input": [
        {"role": "user", "content": [{"type": "input_text", "text": "abcd"}]},
        {"type": "function_call", "call_id": "c1", "name": "look", "arguments": "a" * 396},
        {"type": "function_call_output", "call_id": "c1", "output": "b" * 800}]}
    # 4 + 400 + 800 characters, three items, the priming.
    assert responses_input_tokens(body) == 301 + 3 * 4 + 3


def test_images_count_by_detail_never_by_their_base64():
    data_url = "data:image/png;base64," + "A" * 400_000

    def chat(detail: str) -> int:
        return chat_input_tokens({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url, "detail": detail}}]}]})

    assert chat("low") == 85 + 4 + 3
    assert chat("high") == chat("auto") == 765 + 4 + 3
    assert responses_input_tokens({"input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": data_url, "detail": "low"}]}]}) == 85 + 4 + 3


def test_audio_counts_by_its_length_and_other_parts_by_their_json():
    second = "A" * (32_000 * 4 // 3)  # one second of 16 kHz 16-bit audio, as base64
    body = {"messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": second, "format": "wav"}}]}]}
    assert chat_input_tokens(body) == 10 + 4 + 3
    other = {"type": "file", "file": {"file_id": "file-" + "z" * 95}}
    assert chat_input_tokens({"messages": [{"role": "user", "content": [other]}]}) > 25
