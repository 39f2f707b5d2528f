"""The local pool's workers (``--jobs``): one BLAS thread each (two workers on two cores do not oversubscribe them)."""

from threadpoolctl import threadpool_info

from qkviz.cluster import local_pool


def test_a_worker_uses_one_thread_in_numpys_and_scipys_blas():
    with local_pool(1) as pool:
        pool.submit(exec, "import scipy.linalg").result()       # scipy's own OpenBLAS (imported at start-up today)
        there = pool.submit(threadpool_info).result()
    blas = {info["filepath"]: info["num_threads"] for info in there if info["user_api"] == "blas"}
    assert any("numpy" in path for path in blas) and any("scipy" in path for path in blas)
    assert set(blas.values()) == {1}
