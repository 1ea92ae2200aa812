#!/usr/bin/python3
"""Regenerates the hostile checkpoints of tests/data/bad/checkpoints/ from one valid checkpoint.

Usage: scripts/make-bad-corpus.py ZEROSIM_BINARY
(needs python3-xxhash, Debian's). Each case is a copy of a tiny two-rank checkpoint with one
thing made hostile; where the hostile part is inside a shard, the manifest's size and checksum
are updated so that the reader's deeper checks are reached, not only the checksum. The expected
error of every case is in tests/data/bad/cases.json (kept by hand: regenerating the inputs does
not change what they must be refused with).
"""
import json, os, shutil, struct, subprocess, sys, tempfile
import xxhash

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
out = os.path.join(root, "tests", "data", "bad", "checkpoints")
zerosim = sys.argv[1]

work = tempfile.mkdtemp(prefix="zerosim-bad-corpus-")
subprocess.run([zerosim, "train", "--model", "4,6,3", "--steps", "2", "--world-size", "2",
                "--set", "train_batch_size=4", "--micro-batch-size", "2", "--save-dir", work + "/valid",
                "--run-id", "corpus", "--set", "zero_optimization.offload_optimizer.device=none"],
               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
tag = "global_step2"
shard0 = "rank-00000-of-00002.safetensors"


def make(name, edit):
    """Copies the valid checkpoint to <out>/<name> and applies edit(tag_directory, manifest)."""
    target = os.path.join(out, name)
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(work + "/valid", target)
    tag_directory = os.path.join(target, tag)
    with open(os.path.join(tag_directory, "manifest.json")) as f:
        manifest = json.load(f)
    text = edit(tag_directory, manifest)
    with open(os.path.join(tag_directory, "manifest.json"), "w") as f:
        f.write(text if isinstance(text, str) else json.dumps(manifest, indent=2, sort_keys=True))


def rechecksum(tag_directory, manifest):
    for shard in manifest["shards"]:
        with open(os.path.join(tag_directory, shard["file"]), "rb") as f:
            data = f.read()
        shard["size_bytes"] = len(data)
        shard["xxh3_128"] = xxhash.xxh3_128_hexdigest(data)


def read_shard(tag_directory):
    with open(os.path.join(tag_directory, shard0), "rb") as f:
        data = f.read()
    length = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + length]), data[8 + length:]


def write_shard(tag_directory, manifest, header_text, buffer):
    raw = header_text.encode()
    raw += b" " * (-len(raw) % 8)
    with open(os.path.join(tag_directory, shard0), "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + buffer)
    rechecksum(tag_directory, manifest)


def header_edit(change):
    """A case that rewrites shard 0's safetensors header: change(header) returns the new JSON text."""
    def edit(tag_directory, manifest):
        header, buffer = read_shard(tag_directory)
        write_shard(tag_directory, manifest, change(header), buffer)
    return edit


def first_tensor(header):
    return sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])


def set_field(path, value):
    def edit(tag_directory, manifest):
        node = manifest
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


# The manifest.
make("manifest_shard_path_outside", set_field(["shards", 0, "file"], "../../outside.safetensors"))
make("manifest_shard_path_absolute", set_field(["shards", 1, "file"], "/etc/passwd"))
make("manifest_absurd_shard_size", set_field(["shards", 0, "size_bytes"], 2**60))
make("manifest_absurd_world_size", set_field(["layout", "world_size"], 2**40))
make("manifest_absurd_layer_width", set_field(["model", "layer_widths"], [4, 2**40, 3]))
make("manifest_absurd_element_count", set_field(["layout", "parameters", 0, "element_count"], 2**60))
make("manifest_duplicate_parameter",
     lambda d, m: m["layout"]["parameters"].__setitem__(1, dict(m["layout"]["parameters"][0])))
make("manifest_unknown_format_version", set_field(["format_version"], 99))
make("manifest_not_json", lambda d, m: "{\"format\": \"zerosim-checkpoint\", \"tag\": ")
make("manifest_nested_too_deep", lambda d, m: "[" * 100000 + "]" * 100000)
make("manifest_negative_step", set_field(["counters", "global_steps"], -5))
make("manifest_bad_precision", set_field(["precision"], "fp8"))
make("manifest_checksum_mismatch", set_field(["shards", 0, "xxh3_128"], "0" * 32))

# The shards (the manifest's size and checksum follow them, so the header checks are reached).
make("shard_header_length_absurd", lambda d, m: (
    write_shard(d, m, "", b""),
    open(os.path.join(d, shard0), "wb").write(struct.pack("<Q", 2**60) + b"{}      "),
    rechecksum(d, m)) and None)
make("shard_truncated", lambda d, m: (
    open(os.path.join(d, shard0), "r+b").truncate(os.path.getsize(os.path.join(d, shard0)) - 100),
    rechecksum(d, m)) and None)
make("shard_tensor_claims_2_pow_60_elements", header_edit(lambda h: (
    h[first_tensor(h)[0]].__setitem__("shape", [2**60]), json.dumps(h))[1]))
make("shard_duplicate_tensor_name", header_edit(lambda h: json.dumps(h)[:-1] + ", " +
     json.dumps(first_tensor(h)[0]) + ": " + json.dumps(h[first_tensor(h)[0]]) + "}"))
make("shard_overlapping_tensors", header_edit(lambda h: (
    h[first_tensor(h)[1]].__setitem__("data_offsets", [h[first_tensor(h)[0]]["data_offsets"][0],
                                                       h[first_tensor(h)[1]]["data_offsets"][1] -
                                                       h[first_tensor(h)[1]]["data_offsets"][0] +
                                                       h[first_tensor(h)[0]]["data_offsets"][0]]),
    json.dumps(h))[1]))
make("shard_unknown_dtype", header_edit(lambda h: (h[first_tensor(h)[0]].__setitem__("dtype", "F64"), json.dumps(h))[1]))
make("shard_wrong_dtype_for_state", header_edit(lambda h: (
    [h[k].__setitem__("dtype", "BF16") for k in first_tensor(h) if k.endswith("/param")], json.dumps(h))[1]))
make("shard_header_not_json", header_edit(lambda h: "{\"layers.0.weight/param\": [1, 2"))
make("shard_metadata_offset_outside", header_edit(lambda h: (
    h["__metadata__"].__setitem__(first_tensor(h)[0], json.dumps(dict(
        json.loads(h["__metadata__"][first_tensor(h)[0]]), global_offset=2**50))), json.dumps(h))[1]))
make("shard_tensor_missing", header_edit(lambda h: (
    h.pop(first_tensor(h)[-1]), json.dumps(h))[1]))

# The pointer.
def latest(text):
    def edit(tag_directory, manifest):
        with open(os.path.join(os.path.dirname(tag_directory), "latest"), "w") as f:
            f.write(text)
    return edit
make("latest_names_outside", latest("../elsewhere\n"))
make("latest_names_missing_tag", latest("global_step9\n"))



# Swap files (core/swap/swap_file.h). tests/bad_inputs_test.cpp reads each where it expects the
# master weights of sub-group 0 of rank 0 of 2 in run "corpus", 16 fp32 elements, optimizer step 2.
swap_out = os.path.join(root, "tests", "data", "bad", "swap")
os.makedirs(swap_out, exist_ok=True)


def swap_file(name, run_id=b"corpus", rank=0, world_size=2, sub_group=0, kind=1, element_count=16, dtype=1,
              step=2, version=1, header_bytes=4096, magic=b"ZSSWAP\0\1", corrupt_checksum=False, cut_to=None):
    header = bytearray(4096)
    header[0:8] = magic
    struct.pack_into("<II", header, 8, version, header_bytes)
    header[16:16 + len(run_id)] = run_id
    struct.pack_into("<IIIIQI", header, 80, rank, world_size, sub_group, kind, element_count, dtype)
    payload = struct.pack("<16f", *[float(i) for i in range(16)])
    struct.pack_into("<qQ", header, 112, step, xxhash.xxh3_64_intdigest(payload))
    checksum = xxhash.xxh3_64_intdigest(bytes(header[:128]))
    struct.pack_into("<Q", header, 128, checksum ^ (1 if corrupt_checksum else 0))
    data = bytes(header) + payload + bytes(4096 - len(payload))
    with open(os.path.join(swap_out, name + ".swp"), "wb") as f:
        f.write(data if cut_to is None else data[:cut_to])


swap_file("bad_magic", magic=b"NOTSWAP!")
swap_file("header_checksum_mismatch", corrupt_checksum=True)
swap_file("format_version_from_the_future", version=7)
swap_file("header_size_not_4096", header_bytes=8192)
swap_file("another_runs_file", run_id=b"someone-else")
swap_file("another_ranks_file", rank=1)
swap_file("saved_at_another_world_size", world_size=4)
swap_file("another_sub_group", sub_group=3)
swap_file("exp_avg_under_the_masters_name", kind=2)
swap_file("claims_2_pow_60_elements", element_count=2**60)
swap_file("unknown_dtype", dtype=99)
swap_file("from_a_later_step", step=9)
swap_file("header_cut_short", cut_to=1000)

shutil.rmtree(work)
print("wrote", len(os.listdir(out)), "hostile checkpoints under", out, "and", len(os.listdir(swap_out)),
      "swap files under", swap_out)
