"""Stage and push the Hugging Face Space: exactly the files the Space repo holds, and nothing else.

    python -m demo.deploy.space stage DIR [--force] [--presets a,b]   write the Space's files into DIR
    python -m demo.deploy.space push OWNER/NAME [--dry-run] [--presets a,b]

`stage` copies the app (app.py, demo/, assets/, docs/) from this checkout's files (tracked or
new, never ignored ones: no runs/, no caches), and writes the three files a Space reads
differently from a checkout:
    README.md         the card; its front matter gains `models:` and `preload_from_hub:` for the
                      hub presets named by --presets (the Space's build downloads those repos)
    requirements.txt  the local one with torch pinned to TORCH_FOR_SPACE, a version ZeroGPU
                      supports (the local pin is a CPU wheel that ZeroGPU does not list)
    .gitattributes    this checkout's: large binaries go through LFS/Xet
No tests, no history: a snapshot, so the Space never sees the 13 old versions of the embedded
target that this repository's history holds. DIR must be empty or absent, unless --force.

`push` stages into a temporary folder and sends it with huggingface_hub: `create_repo(...,
repo_type="space", space_sdk="gradio", exist_ok=True)`, the Space variable DEMO_PRELOAD set to
--presets (`demo.models.zerogpu`), then one `upload_folder` commit that also deletes files the snapshot
no longer has; large files go through LFS/Xet by themselves. `--dry-run` lists what would be
uploaded, with sizes, and contacts nobody. Pushing needs a token (`hf auth login` or HF_TOKEN).
"""

from __future__ import annotations

import argparse
import fnmatch
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from demo import ROOT
from demo.models import presets, zerogpu

TORCH_FOR_SPACE = "2.11.0"  # the newest torch that hub-docs' spaces-zerogpu.md lists as supported
INCLUDE = (
    "app.py",
    "demo/",
    "assets/",
    "docs/",
    ".gitattributes",
)  # copied as they are
EXCLUDE = ("demo/lab/",)  # benchmarks and training: nothing the Space runs imports them
LFS_LIMIT = 10 * 2**20  # the hub refuses files above this that LFS/Xet does not carry


class SpaceError(RuntimeError):
    """Staging or pushing cannot go on; the message is one sentence for the person."""


def source_files(root: Path = ROOT) -> list[str]:
    """The checkout's files that go to the Space as they are: tracked or new, never ignored."""
    listed = subprocess.run(
        [
            "git",
            "-C",
            str(root),
            "ls-files",
            "--cached",
            "--others",
            "--exclude-standard",
            "-z",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    return sorted(
        f
        for f in listed
        if f
        and (root / f).is_file()
        and any(f == i or f.startswith(i) for i in INCLUDE)
        and not f.startswith(EXCLUDE)
        and "__pycache__" not in f
    )


def space_requirements(local: str) -> str:
    """The Space's requirements.txt: the local one with torch pinned to TORCH_FOR_SPACE."""
    lines = [
        "# Written by `python -m demo.deploy.space stage`: the local requirements.txt with torch pinned to a",
        f"# version ZeroGPU supports ({TORCH_FOR_SPACE}); `spaces` is preinstalled on Spaces and not listed.",
    ]
    for line in local.splitlines():
        if line.startswith("#"):
            continue
        lines.append(f"torch=={TORCH_FOR_SPACE}" if line.replace(" ", "").startswith("torch==") else line)
    return "\n".join(lines) + "\n"


def hub_repos(names: tuple[str, ...]) -> list[str]:
    """The hub repos (targets and drafters) of the named presets, in order; local ones left out."""
    repos = []
    for name in names:
        if name not in presets.PRESETS:
            raise SpaceError(f"Unknown preset {name!r}; the presets are: {', '.join(presets.PRESETS)}.")
        p = presets.PRESETS[name]
        for ref in (p.target, *(s.path for s in p.drafters)):
            if not Path(ref).is_absolute() and not ref.startswith(".") and ref not in repos:
                repos.append(ref)
    return repos


def space_card(readme: str, names: tuple[str, ...]) -> str:
    """README.md with `models:` and `preload_from_hub:` in its front matter set to the hub
    presets' repos (removed when there are none)."""
    if not readme.startswith("---\n"):
        raise SpaceError("README.md has no front matter (a block between two '---' lines), so it is no Space card.")
    head, body = readme[4:].split("\n---\n", 1)
    kept, skipping = [], False
    for line in head.splitlines():
        if line.startswith(("models:", "preload_from_hub:")):
            skipping = True
            continue
        if skipping and line.startswith("  - "):
            continue
        skipping = False
        kept.append(line)
    repos = hub_repos(names)
    if repos:
        kept += [
            "models:",
            *(f"  - {r}" for r in repos),
            "preload_from_hub:",
            *(f"  - {r}" for r in repos),
        ]
    return "---\n" + "\n".join(kept) + "\n---\n" + body


def stage(
    folder: Path,
    names: tuple[str, ...] = (presets.DEFAULT_PRESET,),
    force: bool = False,
) -> list[Path]:
    """Write the Space's files into `folder`; returns them, relative to it, sorted."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise SpaceError(f"{folder} is a file, not a folder; stage into an empty or new folder.")
    if folder.exists() and any(folder.iterdir()):
        if not force:
            raise SpaceError(
                f"{folder} is not empty; stage into an empty or new folder, or pass --force to replace it."
            )
        shutil.rmtree(folder)
    card = space_card((ROOT / "README.md").read_text(), names)  # checked before anything is written
    folder.mkdir(parents=True, exist_ok=True)
    for name in source_files():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, folder / name)
    (folder / "README.md").write_text(card)
    (folder / "requirements.txt").write_text(space_requirements((ROOT / "requirements.txt").read_text()))
    return sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())


def lfs_patterns(folder: Path) -> list[str]:
    lines = (folder / ".gitattributes").read_text().splitlines() if (folder / ".gitattributes").is_file() else []
    return [line.split()[0] for line in lines if "filter=lfs" in line]


def listing(folder: Path, files: list[Path]) -> str:
    """What an upload of `folder` sends: one line per file with its size and how it travels."""
    patterns = lfs_patterns(folder)
    rows, total = [], 0
    for f in files:
        size = (folder / f).stat().st_size
        total += size
        lfs = any(fnmatch.fnmatch(f.name, p) or fnmatch.fnmatch(str(f), p) for p in patterns)
        rows.append(f"{size:>12,}  {'LFS' if lfs else 'git'}  {f}")
    rows.append(f"{total:>12,}  bytes in {len(files)} files")
    return "\n".join(rows)


def push(repo_id: str, names: tuple[str, ...], dry_run: bool = False) -> str:
    """Create or update the Space `repo_id` with a fresh snapshot; returns what it did."""
    from huggingface_hub import HfApi, get_token
    from huggingface_hub.errors import OfflineModeIsEnabled

    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise SpaceError(f"{repo_id!r} is not OWNER/NAME, e.g. my-name/speculative-decoding.")
    with tempfile.TemporaryDirectory(prefix="space-") as tmp:
        files = stage(Path(tmp), names)
        if dry_run:
            return f"Would upload to spaces/{repo_id} (DEMO_PRELOAD={','.join(names)}):\n" + listing(Path(tmp), files)
        token = get_token()
        if not token:
            raise SpaceError(
                "No Hugging Face token: run `hf auth login` or set HF_TOKEN, then push again; nothing was uploaded."
            )
        api = HfApi(token=token)
        try:
            api.create_repo(repo_id, repo_type="space", space_sdk="gradio", exist_ok=True)
            api.add_space_variable(repo_id, zerogpu.PRELOAD_ENV, ",".join(names))
        except (OfflineModeIsEnabled, OSError) as error:
            raise SpaceError(_unreachable(error) + "; nothing was uploaded.") from error
        except Exception as error:
            if _network(error):
                raise SpaceError(_unreachable(error) + "; nothing was uploaded.") from error
            raise
        try:
            commit = api.upload_folder(
                repo_id=repo_id,
                repo_type="space",
                folder_path=tmp,
                commit_message="Update the Space from `python -m demo.deploy.space push`",
                delete_patterns="*",  # the Space holds the snapshot, not leftovers of older ones
            )
        except Exception as error:
            raise SpaceError(
                f"The upload failed ({type(error).__name__}: {_first_line(error)}); upload_folder makes one commit, "
                "so the Space's files were not changed, though some large files may already be stored."
            ) from error
    return f"Pushed {len(files)} files to spaces/{repo_id}: {commit.commit_url}"


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [""])[0][:160]


def _network(error: BaseException) -> bool:
    """A connection that failed (huggingface_hub's HTTP client raises its own TransportError)."""
    names = {cls.__name__ for cls in type(error).__mro__}
    return bool(names & {"TransportError", "ConnectionError", "TimeoutError"})


def _unreachable(error: BaseException) -> str:
    if type(error).__name__ == "OfflineModeIsEnabled":
        return "The Hugging Face hub is off on this machine (HF_HUB_OFFLINE=1)"
    return f"The Hugging Face hub cannot be reached ({type(error).__name__}: {_first_line(error)})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.deploy.space", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("stage", "write the Space's files into DIR"),
        ("push", "create or update the Space"),
    ):
        command = commands.add_parser(name, help=help_text)
        command.add_argument("target", metavar="DIR" if name == "stage" else "OWNER/NAME")
        command.add_argument(
            "--presets",
            default=presets.DEFAULT_PRESET,
            help="comma-separated presets the Space preloads and serves (default: %(default)s)",
        )
        if name == "stage":
            command.add_argument("--force", action="store_true", help="replace what DIR holds")
        else:
            command.add_argument(
                "--dry-run",
                action="store_true",
                help="list what would be uploaded, with sizes",
            )
    args = parser.parse_args(argv)
    names = tuple(dict.fromkeys(n.strip() for n in args.presets.split(",") if n.strip()))
    try:
        if args.command == "stage":
            files = stage(Path(args.target), names, force=args.force)
            print(listing(Path(args.target), files))
        else:
            print(push(args.target, names, dry_run=args.dry_run))
    except SpaceError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
