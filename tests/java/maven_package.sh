#!/usr/bin/env bash
# oslo.jar as a Java user gets it: `mvn package` of bindings/java/pom.xml
# offline against Debian's Maven packages (maven-offline-settings.xml: every
# repository mirrored to file:///usr/share/maven-repo, the local repository
# in the build tree), which compiles the binding, runs its JUnit suite in
# surefire (tests/java/jar: natives extracted into a fresh cache, verified,
# loaded; a generate and a SentencePiece encode against the references) and
# packs the jar. Then, from a temporary folder outside the build tree, with
# a fresh cache and no java.library.path, oslo.library.path,
# OSLO_JNI_LIBRARY or LD_LIBRARY_PATH: the jar holds its natives,
# examples/java/SemanticSearch.java compiled against the jar alone prints
# the C main job's table on 2 ranks (tests/bindings/same_output.sh; both
# JVMs extract into the same empty cache at once), and the cache holds the
# jar's natives, each matching its SHA256SUMS; a second JVM
# (examples/java/Generate.java, gpt2-tiny) uses them as they are, and a
# third, after liboslo.so.0 in the cache is cut short, writes it again;
# with -Doslo.library.path or -Djava.library.path naming the build tree's
# liboslo_jni.so nothing is extracted.
#
# Usage: maven_package.sh BUILD_DIR SOURCE_DIR VERSION MVN JAVA JAVAC OSLO_RUN C_EXAMPLE MODEL REFERENCE
set -euo pipefail
[ $# -eq 10 ] || { echo "usage: $0 BUILD_DIR SOURCE_DIR VERSION MVN JAVA JAVAC OSLO_RUN C_EXAMPLE MODEL REFERENCE" >&2; exit 2; }
build=$1 src=$2 version=$3 mvn=$4 java=$5 javac=$6 run=$7 c_example=$8 model=$9 ref=${10}
if [ ! -x "$mvn" ]; then
  echo "FAIL: no mvn ('$mvn'): apt-get install maven libmaven-compiler-plugin-java libsurefire-java" \
       "libmaven-jar-plugin-java libmaven-resources-plugin-java (bash tools/deps.sh --test)"
  exit 1
fi
jbuild=$build/bindings/java
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset OSLO_JNI_LIBRARY LD_LIBRARY_PATH JAVA_TOOL_OPTIONS _JAVA_OPTIONS JDK_JAVA_OPTIONS \
  MAVEN_OPTS MAVEN_ARGS CLASSPATH WORLD_SIZE RANK
export HOME=$tmp/home XDG_CACHE_HOME=$tmp/cache
mkdir -p "$HOME"

echo "== mvn package (offline, Debian's /usr/share/maven-repo)"
start=$(date +%s)
rm -rf "$jbuild/maven"
if ! "$mvn" -B -ntp -Dstyle.color=never -s "$src/bindings/java/maven-offline-settings.xml" \
    -Dmaven.repo.local="$jbuild/maven-repo" -Doslo.java.build="$jbuild" \
    -f "$src/bindings/java/pom.xml" package >"$tmp/mvn.out" 2>&1; then
  cat "$tmp/mvn.out"
  echo "FAIL: mvn package"
  exit 1
fi
grep -E '^\[(INFO|WARNING|ERROR)\] (Tests run|Running|BUILD)' "$tmp/mvn.out" || true
# The suite ran, every test of it, none skipped.
summary=$(grep -E '^\[INFO\] Tests run: [0-9]+, Failures: 0, Errors: 0, Skipped: 0$' "$tmp/mvn.out" | tail -1)
tests=$(echo "$summary" | sed -E 's/.*Tests run: ([0-9]+),.*/\1/')
if [ -z "$summary" ] || [ "$tests" -lt 13 ]; then
  cat "$tmp/mvn.out"
  echo "FAIL: expected the whole JUnit suite (13 tests or more) passing, none skipped"
  exit 1
fi
echo "mvn package: $tests JUnit tests passed in $(($(date +%s) - start)) s"

jar=$jbuild/maven/oslo-$version.jar
app=$tmp/app
mkdir -p "$app"
cp "$jar" "$app/oslo.jar"
echo "== $jar"
unzip -l "$app/oslo.jar" 'native/*'
entries=$(unzip -Z1 "$app/oslo.jar")
for f in liboslo.so.0 liboslo_jni.so liboslo_sentencepiece.so SHA256SUMS; do
  grep -qx "native/linux-x86_64/$f" <<<"$entries" ||
    { echo "FAIL: the jar lacks native/linux-x86_64/$f"; exit 1; }
done

echo "== examples/java/SemanticSearch.java against the jar alone, 2 ranks, from $app"
cd "$app"
"$javac" -Xlint:all -Werror -d classes -cp oslo.jar "$src/examples/java/SemanticSearch.java"
sh "$src/tests/bindings/same_output.sh" "$run" "$c_example" "$model" "$ref" -- \
  "$java" -cp oslo.jar:classes SemanticSearch --device cpu

echo "== the cache ($XDG_CACHE_HOME/oslo)"
unzip -p oslo.jar native/linux-x86_64/SHA256SUMS >"$tmp/SHA256SUMS"
dirs=("$XDG_CACHE_HOME"/oslo/*/)
if [ ${#dirs[@]} -ne 1 ] || [ ! -d "${dirs[0]}" ]; then
  echo "FAIL: expected one folder in $XDG_CACHE_HOME/oslo: ${dirs[*]}"
  exit 1
fi
name=$(basename "${dirs[0]}")
[ "$name" = "$(sha256sum <"$tmp/SHA256SUMS" | cut -d' ' -f1)" ] ||
  { echo "FAIL: the cache folder $name is not the SHA-256 of the jar's SHA256SUMS"; exit 1; }
(cd "${dirs[0]}" && sha256sum -c "$tmp/SHA256SUMS")
# RUNPATH $ORIGIN: the dynamic loader finds liboslo next to the JNI library.
ldd "${dirs[0]}/liboslo_jni.so" | grep -F "liboslo.so.0 => ${dirs[0]}liboslo.so.0" ||
  { echo "FAIL: liboslo_jni.so does not find liboslo.so.0 in its own folder:";
    ldd "${dirs[0]}/liboslo_jni.so"; exit 1; }

echo "== a second JVM reuses the cache; a corrupted cached library is replaced"
"$javac" -Xlint:all -Werror -d classes -cp oslo.jar "$src/examples/java/Generate.java"
fixture=$src/tests/models/fixtures/gpt2-tiny
want="gpt2 at TP=1: 139 1 502 139 139 1 90 139 141 448 94 94"  # as java_example_generate_gpt2_tp2
ids() { (cd "${dirs[0]}" && stat -c '%n %i %Y' liboslo.so.0 liboslo_jni.so liboslo_sentencepiece.so); }
before=$(ids)
sleep 1
out=$("$java" -cp oslo.jar:classes Generate --device cpu "$fixture" 12 52 441 221)
[ "$out" = "$want" ] || { echo "FAIL: Generate printed '$out', expected '$want'"; exit 1; }
[ "$(ids)" = "$before" ] || { echo "FAIL: the cache was rewritten:"; echo "$before"; ids; exit 1; }
echo "reused: $out"
head -c 4096 "${dirs[0]}/liboslo.so.0" >"$tmp/half" && cat "$tmp/half" >"${dirs[0]}/liboslo.so.0"
out=$("$java" -cp oslo.jar:classes Generate --device cpu "$fixture" 12 52 441 221)
[ "$out" = "$want" ] || { echo "FAIL: after corrupting the cache, Generate printed '$out'"; exit 1; }
(cd "${dirs[0]}" && sha256sum -c "$tmp/SHA256SUMS")

echo "== explicit library paths come first: nothing extracted"
for opt in "-Doslo.library.path=$jbuild" "-Djava.library.path=$jbuild"; do
  export XDG_CACHE_HOME=$tmp/cache-$RANDOM
  out=$("$java" "$opt" -cp oslo.jar:classes Generate --device cpu "$fixture" 12 52 441 221)
  [ "$out" = "$want" ] || { echo "FAIL: with $opt Generate printed '$out'"; exit 1; }
  [ ! -e "$XDG_CACHE_HOME" ] || { echo "FAIL: with $opt the jar's natives were extracted"; exit 1; }
  echo "$opt: $out"
done
echo "java_maven_package: OK"
