"""Launch command lines, whatever the spelling."""

from __future__ import annotations

from llmtriage.facts import Citation
from llmtriage.parse.launch import apply_env, merge_args_dict, parse_launch


def test_vllm_serve_both_spellings() -> None:
    c = parse_launch(
        "vllm serve Qwen/Qwen2.5-72B-Instruct --port 1234 --gpu_memory_utilization=0.8 --max-model-len 131072 "
        "--tensor-parallel-size 8 --enable-prefix-caching --kv-cache-dtype fp8",
        "launch.txt",
    )
    assert (c.engine, c.model, c.port, c.gpu_memory_utilization, c.max_model_len) == (
        "vllm",
        "Qwen/Qwen2.5-72B-Instruct",
        1234,
        0.8,
        131072,
    )
    assert (c.tensor_parallel_size, c.enable_prefix_caching, c.kv_cache_dtype) == (8, True, "fp8")
    assert c.citations["max_model_len"].excerpt == "--max-model-len 131072"


def test_docker_run_with_env_and_negative_flags() -> None:
    c = parse_launch(
        "docker run --gpus all -e HF_TOKEN=x -e VLLM_CPU_KVCACHE_SPACE=4 -p 8000:8000 "
        "vllm/vllm-openai:v0.9.1 --model m --max_num_seqs 512 --no-enable-prefix-caching --enforce-eager -tp 2",
        "docker",
    )
    assert (c.engine, c.model, c.max_num_seqs, c.tensor_parallel_size) == ("vllm", "m", 512, 2)
    assert (c.enable_prefix_caching, c.enforce_eager, c.cpu_kv_cache_space_gib) == (False, True, 4.0)
    assert c.env["HF_TOKEN"] == "x"
    assert "--gpus all" in c.unknown_args


def test_environment_file_adds_to_the_command_line() -> None:
    c = parse_launch("vllm serve m --max-model-len 1024", "config/launch.txt")
    apply_env(c, "VLLM_CPU_KVCACHE_SPACE=4\nHF_HOME='/srv/my hf'\nnot an assignment\nlower=x\n", "config/env.txt")
    assert (c.max_model_len, c.cpu_kv_cache_space_gib) == (1024, 4.0)
    assert c.env == {"VLLM_CPU_KVCACHE_SPACE": "4", "HF_HOME": "/srv/my hf"}
    assert c.citations["cpu_kv_cache_space_gib"] == Citation(
        source="config/env.txt", excerpt="VLLM_CPU_KVCACHE_SPACE=4"
    )


def test_other_engines() -> None:
    s = parse_launch(
        "python -m sglang.launch_server --model-path M --context-length 4096 --mem-fraction-static 0.88", "s"
    )
    assert (s.engine, s.model, s.max_model_len, s.gpu_memory_utilization) == ("sglang", "M", 4096, 0.88)
    t = parse_launch("text-generation-launcher --model-id google/flan-ul2 --num-shard 4 --max-total-tokens 4096", "t")
    assert (t.engine, t.model, t.tensor_parallel_size, t.max_model_len) == ("tgi", "google/flan-ul2", 4, 4096)
    ll = parse_launch("./llama-server -m model.gguf -c 8192 -ngl 99 --parallel 4 -t 8", "l")
    assert (ll.engine, ll.model, ll.max_model_len, ll.n_gpu_layers, ll.max_num_seqs, ll.threads) == (
        "llama_cpp",
        "model.gguf",
        8192,
        99,
        4,
        8,
    )


def test_python_keyword_arguments_and_prose() -> None:
    c = parse_launch("LLM(...) via a wrapper, gpu_memory_utilization=0.70, max model len 4096", "prose")
    assert c.gpu_memory_utilization == 0.70 and c.engine == "vllm"


def test_unbalanced_quotes_and_bad_values_do_not_raise() -> None:
    c = parse_launch("vllm serve 'm --max-model-len lots --port", "bad")
    assert c.max_model_len is None


def test_non_default_args_fill_gaps_only() -> None:
    c = parse_launch("vllm serve m --max-model-len 1024", "launch.txt")
    merge_args_dict(
        c,
        "{'host': '127.0.0.1', 'port': 18000, 'model': 'models/tiny', 'max_model_len': 4096, 'max_num_seqs': 8}",
        Citation("server.log", 12),
    )
    assert (c.max_model_len, c.max_num_seqs, c.port) == (1024, 8, 18000)
    merge_args_dict(c, "not a dict {", Citation("server.log", 13))
