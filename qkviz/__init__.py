"""qkviz: what every attention head of a transformer does, from its own queries and keys.

Every command is a function first::

    import qkviz
    run = qkviz.extract("minilm", qkviz.DEFAULT_CORPUS, "runs/minilm")   # the bundled corpus, or a file of yours
    qkviz.project(run, jobs=2)                 # every head's default layouts (qkviz.projection.DEFAULT_METHODS)
    qkviz.build_indexes(run); qkviz.compute_stats(run); qkviz.relate_heads(run)
    qkviz.write_report(qkviz.correlation_report(run), "reports/minilm")
    qkviz.attention_change(run, "runs/minilm-finetuned")   # per head: JS distance of its attention
    run.projection(3, 4); run.atlas.table; run.partners(3, 4, point=17, k=10)

In a notebook, a model and tokenizer in memory and any iterable of strings extract the same way
(``qkviz.extract(model, sentences, "runs/mine", tokenizer=tok)``); ``run.plot(3, 4, colour="position")`` is
one head as a Plotly figure and ``run.show()`` the whole app inline (``examples/notebook.ipynb``).
An image model reads images the same way: ``qkviz.extract(vit, qkviz.load_images("photos/"), "runs/vit",
processor=proc)``, each image one sequence of its special tokens and patches.

The subpackages are layered (each imports only those below it): ``report`` > ``analysis`` |
``search`` | ``projection`` | ``extraction`` > ``store`` > ``core``. ``import qkviz`` does not import
torch: extraction imports it when called.
"""

from qkviz.analysis import attention_change, correlation_table, relate_heads
from qkviz.api import Run, extract, open_run
from qkviz.core import IncompleteRunError, QkvizError
from qkviz.probes import compute_stats
from qkviz.extraction import DEFAULT_CORPUS, load_images, sample_images
from qkviz.projection import project
from qkviz.report import correlation_report, write_report
from qkviz.search import build_indexes

__version__ = "0.1.0"

__all__ = ["DEFAULT_CORPUS", "IncompleteRunError", "QkvizError", "Run", "__version__", "attention_change", "build_indexes",
           "compute_stats", "correlation_report", "correlation_table", "extract", "load_images", "open_run", "project", "relate_heads",
           "sample_images", "write_report"]
