__version__ = "0.1.0"

def part_surface(package:str, names:dict):
    """A part's `__all__` and `__getattr__` from {module: 'name name …'}: a public name loads its module on first use,
    so importing a part stays cheap."""
    where = {n: m for m, ns in names.items() for n in ns.split()}
    def __getattr__(name):
        if name not in where: raise AttributeError(f"module {package!r} has no attribute {name!r}")
        from importlib import import_module
        return getattr(import_module(f'{package}.{where[name]}'), name)
    return sorted(where), __getattr__
