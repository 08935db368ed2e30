"""The V2GP commands' flags off their defaults (issue 31.2): each flag of `finetune`, `v2gp run` and
`v2gp synth` reaches the config the command hands its library call, so that a flag the command drops fails here.
What each config field then does is tested in test_v2gp_finetune.py, test_v2gp_pipeline.py, test_v2gp_ray.py,
test_v2gp_embodiments.py and test_v2gp_segment.py (the `segment` flags there, from the command line)."""

from __future__ import annotations

from grounded_planner.cli.main import main
from grounded_planner.v2gp.config import V2GPConfig
from grounded_planner.v2gp.finetune import FinetuneConfig
from grounded_planner.v2gp.synthetic import SyntheticConfig
from helpers.calls import record_calls


def test_finetune_flags_reach_the_finetune_config(monkeypatch, capsys, tmp_path):
    calls = record_calls(monkeypatch, "grounded_planner.cli.v2gp.finetune", {"steps": 1})
    flags = {
        "--epochs": ("epochs", 1.5),
        "--max-steps": ("max_steps", 7),
        "--lr": ("learning_rate", 5e-5),
        "--rank": ("lora_rank", 4),
        "--dropout": ("lora_dropout", 0.25),
        "--target-modules": ("target_modules", "q_proj"),
        "--batch-size": ("batch_size", 8),
        "--micro-batch-size": ("micro_batch_size", 2),
        "--eval-fraction": ("eval_fraction", 0.125),
        "--eval-every": ("eval_every", 3),
        "--save-every": ("save_every", 5),
        "--dataloader-workers": ("dataloader_workers", 2),
        "--report-to": ("report_to", "none"),
        "--max-image-side": ("max_image_side", 448),
        "--device": ("device", "cpu"),
        "--seed": ("seed", 11),
    }
    switches = {"--gradient-checkpointing": "gradient_checkpointing", "--resume": "resume"}
    argv = [
        "finetune",
        "--data",
        str(tmp_path / "train.jsonl"),
        "--base-model",
        str(tmp_path / "model"),
        "--out",
        str(tmp_path / "adapter"),
    ]
    for flag, (_, value) in flags.items():
        argv += [flag, str(value)]
    argv += list(switches)
    assert main(argv) == 0, capsys.readouterr().err
    (((data, base, out, config), _),) = [(c[0], c[1]) for c in calls]
    assert (data, base, out) == (str(tmp_path / "train.jsonl"), str(tmp_path / "model"), str(tmp_path / "adapter"))
    default = FinetuneConfig()
    wanted = {field: value for field, value in flags.values()} | {field: True for field in switches.values()}
    for field, value in wanted.items():
        assert getattr(default, field) != value, f"{field}: the test's value is the default"
    assert {field: getattr(config, field) for field in wanted} == wanted


def test_run_flags_reach_the_pipeline_config(monkeypatch, capsys, tmp_path):
    from grounded_planner.v2gp.pipeline import RunSummary

    calls = record_calls(
        monkeypatch,
        "grounded_planner.cli.v2gp.run_pipeline",
        RunSummary(dataset=str(tmp_path / "ds"), out=str(tmp_path / "out")),
    )
    argv = [
        "v2gp",
        "run",
        "--dataset",
        str(tmp_path / "ds"),
        "--out",
        str(tmp_path / "out"),
        "--vlm",
        "http://127.0.0.1:9/v1",
        "--vlm",
        "http://127.0.0.1:10/v1",
        "--model",
        "qwen3-vl-test",
        "--identifier",
        "oracle",
        "--grounder",
        "sam3",
        "--workers",
        "3",
        "--executor",
        "ray",
        "--ray-address",
        "127.0.0.1:6379",
        "--episodes",
        "0,3-4",
        "--no-implicit",
        "--quiet",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    (((dataset, out, config), kwargs),) = calls
    assert (dataset, out) == (str(tmp_path / "ds"), str(tmp_path / "out"))
    wanted = {
        "vlm_base_url": "http://127.0.0.1:9/v1",
        "vlm_base_urls": ["http://127.0.0.1:10/v1"],
        "vlm_model": "qwen3-vl-test",
        "identifier": "oracle",
        "grounder": "sam3",
        "workers": 3,
        "executor": "ray",
        "ray_address": "127.0.0.1:6379",
        "implicit": False,
    }
    default = V2GPConfig()
    for field, value in wanted.items():
        assert getattr(default, field) != value, f"{field}: the test's value is the default"
    assert {field: getattr(config, field) for field in wanted} == wanted
    assert sorted(kwargs["episodes"]) == [0, 3, 4] and kwargs["progress"] is None  # --quiet: no progress lines


def test_synth_flags_reach_the_synthetic_dataset(monkeypatch, capsys, tmp_path):
    calls = record_calls(monkeypatch, "grounded_planner.cli.v2gp.write_synthetic_dataset", tmp_path / "ds")
    argv = [
        "v2gp",
        "synth",
        "--out",
        str(tmp_path / "ds"),
        "--episodes",
        "2",
        "--seed",
        "9",
        "--format",
        "v3.0",
        "--video",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    (((out, cfg), kwargs),) = calls
    wanted = {"episodes": 2, "seed": 9, "video": True}
    default = SyntheticConfig()
    assert all(getattr(default, k) != v for k, v in wanted.items())
    assert str(out) == str(tmp_path / "ds") and {k: getattr(cfg, k) for k in wanted} == wanted
    assert kwargs["version"] == "v3.0"  # the default is v2.1


def test_synth_writes_the_episodes_and_format_it_is_asked_for(capsys, tmp_path):
    """The same flags end to end, without video: the dataset on disk says v3.0 and holds two episodes."""
    import json

    assert main(["v2gp", "synth", "--out", str(tmp_path / "ds"), "--episodes", "2", "--format", "v3.0"]) == 0
    info = json.loads((tmp_path / "ds" / "meta" / "info.json").read_text())
    assert (info["codebase_version"], info["total_episodes"]) == ("v3.0", 2)
