"""rushhour/warm.py: a factory imports at its first call; a warm thread imports, quietly, in the background."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rushhour.warm import later, warm


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_factory_imports_at_its_first_call_not_before(module_dir: Path) -> None:
    (module_dir / "rh_warm_late.py").write_text("class Made:\n    def __init__(self, x):\n        self.x = x\n")
    make = later("rh_warm_late", "Made")
    assert "rh_warm_late" not in sys.modules
    assert make(3).x == 3 and "rh_warm_late" in sys.modules


def test_a_warm_thread_imports_and_a_broken_module_is_left_quietly_to_its_user(
        module_dir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (module_dir / "rh_warm_ok.py").write_text("VALUE = 1\n")
    (module_dir / "rh_warm_broken.py").write_text("raise RuntimeError('broken on import')\n")
    warm("rh_warm_broken", "rh_warm_ok").join()
    assert "rh_warm_ok" in sys.modules and "rh_warm_broken" not in sys.modules
    assert "Traceback" not in capfd.readouterr().err
    with pytest.raises(RuntimeError, match="broken on import"):  # its user imports it again and hears why
        later("rh_warm_broken", "anything")()
