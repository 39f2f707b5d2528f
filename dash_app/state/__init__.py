"""The view state and what changes it: ``view_state`` (what the URL holds, and the pure transitions of user actions),
``view_registry`` (the views, each declared once, from which the shell is derived), ``control_options`` (the
options of the controls that set the state) and ``events`` (browser events, relayed and parsed)."""
