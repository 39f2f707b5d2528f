"""The layout methods, one module each: every module here declares its :class:`~qkviz.projection.catalogue.
ProjectionMethod` and registers it, and :mod:`qkviz.projection.catalogue` imports them all. A new method is a
new module here."""
