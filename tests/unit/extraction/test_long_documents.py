"""A long document split into windows: each window the special tokens and a slice of the text tokens, with
the stated overlap, and where it starts in the document; a document too long without --chunk is refused."""

import pytest

from qkviz.core.errors import QkvizError
from qkviz.extraction.inputs.long_documents import default_overlap, refused_past, split_into_windows
from qkviz.extraction.inputs.selection import TokenizedSentence


def document(n_words: int, opening: int = 1, closing: int = 0) -> TokenizedSentence:
    """``n_words`` words ``w0 w1 ...``, one token each (id 100 + i), between special tokens 1 (opening) and 2."""
    words = [f"w{i}" for i in range(n_words)]
    text = " ".join(words)
    starts = [sum(len(w) + 1 for w in words[:i]) for i in range(n_words)]
    return TokenizedSentence(
        corpus_index=7, text=text,
        token_ids=(1,) * opening + tuple(100 + i for i in range(n_words)) + (2,) * closing,
        offsets=((0, 0),) * opening + tuple((s, s + len(w)) for s, w in zip(starts, words)) + ((0, 0),) * closing,
        special=(True,) * opening + (False,) * n_words + (True,) * closing,
        truncated=False)


@pytest.mark.parametrize("opening, closing", [(1, 0), (1, 1), (0, 0)])
def test_windows_cover_the_text_with_the_stated_overlap_and_record_their_offsets(opening, closing):
    doc = document(50, opening, closing)
    windows = split_into_windows(doc, size=16, overlap=4)
    body = 16 - opening - closing
    assert all(len(w) <= 16 for w in windows)
    assert [w.token_offset for w in windows] == list(range(0, 50 - 4, body - 4))[:len(windows)]
    text_ids = [100 + i for i in range(50)]
    covered = set()
    for window, following in zip(windows, windows[1:] + [None]):
        ids = list(window.token_ids)
        assert ids[:opening] == [1] * opening and ids[len(ids) - closing:] == [2] * closing
        own = ids[opening:len(ids) - closing]
        assert own == text_ids[window.token_offset:window.token_offset + len(own)]
        covered.update(own)
        if following is not None:
            assert following.token_offset == window.token_offset + len(own) - 4   # 4 text tokens shared
        # the window's text is the document's, from its char_offset; its tokens' offsets are into it
        assert doc.text[window.char_offset:window.char_offset + len(window.text)] == window.text
        for token_id, (start, end), special in zip(window.token_ids, window.offsets, window.special):
            if not special:
                assert window.text[start:end] == f"w{token_id - 100}"
        assert window.corpus_index == 7 and not window.truncated
    assert covered == set(text_ids)
    assert windows[-1].token_ids[len(windows[-1]) - closing - 1] == 149      # the last window ends the document


def test_a_document_that_fits_is_itself():
    doc = document(15)
    assert split_into_windows(doc, size=16, overlap=2) == [doc]


def test_the_default_overlap_is_an_eighth_of_a_window():
    assert default_overlap(8192) == 1024 and default_overlap(128) == 16 and default_overlap(7) == 0


def test_a_document_longer_than_the_context_is_refused_with_its_count():
    rule = refused_past(32)
    assert rule(document(31)) == [document(31)]
    with pytest.raises(QkvizError) as error:
        rule(document(9411))
    message = str(error.value)
    assert message.startswith("document 8 ('w0 w1 w2")
    assert "has 9,412 tokens, more than the model's context of 32: give chunk=N (or max_length=N to " \
           "truncate)" in message
    assert "\n" not in message
    assert refused_past(None)(document(9411)) == [document(9411)]


def test_batches_of_long_windows_hold_at_most_8192_padded_tokens():
    from qkviz.extraction.streaming.text_capture import _batches

    assert [list(b) for b in _batches([8192, 8192, 5000, 4000, 100], 16)] == [[0], [1], [2], [3, 4]]
    assert [len(b) for b in _batches([512] * 40, 16)] == [16, 16, 8]
    assert [len(b) for b in _batches([30] * 40, 16)] == [16, 16, 8]      # short sentences: as before
    assert [list(b) for b in _batches([20000, 10], 16)] == [[0], [1]]    # a longer one alone
