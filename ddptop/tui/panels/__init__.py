"""The live view's panels: each a widget that draws itself from a ``RunSnapshot`` (``update_from``), keeps
its own cache of what it drew, and skips the work when nothing it shows has changed."""

from ddptop.tui.panels.chart import StepChart
from ddptop.tui.panels.configs import ConfigNotes, ConfigTable
from ddptop.tui.panels.gpus import GpuTable, HostLine
from ddptop.tui.panels.logs import LogPanel
from ddptop.tui.panels.ranks import RankTable
from ddptop.tui.panels.status import StatusLine
from ddptop.tui.panels.tune import TunePanel

__all__ = ["ConfigNotes", "ConfigTable", "GpuTable", "HostLine", "LogPanel", "RankTable", "StatusLine", "StepChart", "TunePanel"]
