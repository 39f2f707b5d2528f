"""Reading Dash component trees in tests: their strings and their components of one type."""


def texts(component) -> list[str]:
    """Every string in a Dash component tree, depth first."""
    if isinstance(component, str):
        return [component]
    if isinstance(component, (list, tuple)):
        return [text for child in component for text in texts(child)]
    return texts(getattr(component, "children", None) or [])


def find(component, kind) -> list:
    """Every component of type ``kind`` in a tree."""
    found = [component] if isinstance(component, kind) else []
    children = component if isinstance(component, (list, tuple)) else getattr(component, "children", None)
    if isinstance(children, (list, tuple)):
        found += [match for child in children for match in find(child, kind)]
    elif children is not None and not isinstance(children, str):
        found += find(children, kind)
    return found
