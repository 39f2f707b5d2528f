"""qkviz.search.ImageIds: an image run's image ids searched like tokens."""

import pandas as pd

from qkviz.search import ImageIds


def test_an_image_id_matches_every_token_of_its_image_whole_or_as_a_substring():
    sentences = pd.DataFrame({"text": ["cat_01.png", " Dog_02.png ", "cat_03.png"], "first_token": [0, 5, 10],
                              "n_tokens": [5, 5, 5]})
    ids = ImageIds(sentences)
    assert ids.images("DOG_02.PNG ", substring=False).tolist() == [1]
    assert ids.images("cat", substring=False).tolist() == []
    assert ids.images("cat", substring=True).tolist() == [0, 2]
    assert ids.images("  ", substring=True).tolist() == []
    assert ids.tokens(ids.images("cat", substring=True)).tolist() == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]
    assert ids.tokens(ids.images("bird", substring=True)).tolist() == []
