"""load_kernel: a named kernel loads, or Validation says why; nothing else escapes."""

from __future__ import annotations

import pytest

from persistence.errors import Validation
from persistence.kernel import Kernel, load_kernel


class Broken:
    def __init__(self) -> None:
        raise RuntimeError("no config")


def test_the_reference_kernel_loads() -> None:
    assert isinstance(load_kernel("persistence.kernel:ReferenceKernel"), Kernel)


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("persistence.kernel", "module:Class"),
        (":ReferenceKernel", "module:Class"),
        ("no_such_module_xyz:K", "cannot load"),
        ("persistence.kernel:NoSuchClass", "cannot load"),
        ("tests.unit.test_kernel:Broken", "cannot be constructed: no config"),
        ("os:getcwd", "not a kernel"),
        ("builtins:dict", "not a kernel"),
    ],
)
def test_a_bad_kernel_path_is_validation_naming_it(path: str, says: str) -> None:
    with pytest.raises(Validation) as raised:
        load_kernel(path)
    assert raised.value.field == "kernel"
    assert says in str(raised.value)
