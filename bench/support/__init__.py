"""What benches and tests share: tiny random models of each family (text and vision) with their tokenizers and
image processors, the model's own attention to check a run against, and a served app in headless Chromium.
The test suite's ``tests/support`` imports these from here."""
