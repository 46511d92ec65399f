"""Install the agent skill (:func:`qmdlab.mcp_server.instructions.skill_markdown`) where agents look
for skills: ``./.agents/skills/qmdlab/SKILL.md`` (a project) or ``~/.agents/skills/qmdlab/SKILL.md``
(``--global``), optionally linked from ``.claude/skills/qmdlab`` — the layout ``qmd skill install`` uses.

An existing ``SKILL.md`` with other content is never replaced without ``force``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from qmdlab.errors import ConfigError
from qmdlab.mcp_server.instructions import SKILL_NAME, skill_markdown


def skill_dir(base: Path) -> Path:
    """``BASE/.agents/skills/qmdlab``."""
    return base / ".agents" / "skills" / SKILL_NAME


@dataclass
class SkillInstall:
    path: Path
    written: bool
    link: Path | None = None
    notes: list[str] = field(default_factory=list)


def install_skill(base: Path, *, force: bool = False, link_claude: bool = False) -> SkillInstall:
    """Write ``SKILL.md`` under ``base`` (the project folder, or the home folder for a global
    install); with ``link_claude`` also make ``base/.claude/skills/qmdlab`` a link to its folder."""
    try:
        return _install(base, force, link_claude)
    except OSError as err:
        raise ConfigError(
            f"{err.filename or base}: cannot install the skill ({err.strerror or err}); "
            "run it in a folder you can write to, or use --global"
        ) from None


def _install(base: Path, force: bool, link_claude: bool) -> SkillInstall:
    target = skill_dir(base)
    path = target / "SKILL.md"
    text = skill_markdown()
    written = True
    if path.exists() or path.is_symlink():
        if path.is_file() and path.read_text(encoding="utf-8", errors="replace") == text:
            written = False
        elif not force:
            raise ConfigError(
                f"{path} exists with other content; keep it, or replace it with `qmdlab skill install --force`"
            )
    if written:
        target.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name("SKILL.md.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    res = SkillInstall(path, written)
    if link_claude:
        link = base / ".claude" / "skills" / SKILL_NAME
        if link.is_symlink() and Path(os.readlink(link)) in (target, Path(os.path.relpath(target, link.parent))):
            res.link = link
        elif link.exists() or link.is_symlink():
            if not force:
                raise ConfigError(f"{link} exists; remove it, or replace it with `qmdlab skill install --yes --force`")
            if link.is_dir() and not link.is_symlink():
                raise ConfigError(f"{link} is a folder; move it away first (it is never deleted)")
            link.unlink()
        if res.link is None:
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(target, link.parent), target_is_directory=True)
            res.link = link
    return res
