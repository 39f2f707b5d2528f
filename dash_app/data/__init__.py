"""What the app reads of its runs, cached per run: ``run_data`` (each run's layouts, norms, token features,
correlations and atlas), ``atlas_columns`` (how the atlas's columns read), ``image_patches`` (an image run's
pixels), ``token_search`` (the top bar's search) and ``attention_changes`` (the compare view's tables)."""
