#!/usr/bin/env bash
# Builds the nodecare-agent and nodecare-coordinator packages, .deb and .rpm, from this checkout.
#
#   packaging/build-packages.sh [--no-build] [--out DIR]
#
# Steps: one release build (--locked) of the three binaries and the man page/completion
# generator; man pages and bash/zsh/fish completions generated from the binaries' clap
# definitions; `cargo deb --no-build` for the .debs; a staged tree plus `rpmbuild -bb` with the
# binary-only specs in packaging/rpm/ for the .rpms. Packages land in DIR (default
# <target-dir>/packages). Needs cargo-deb 3.8 and rpmbuild (Debian: apt-get install rpm).
# --no-build reuses binaries from an earlier release build.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

build=1
out=
while [ $# -gt 0 ]; do
    case "$1" in
        --no-build) build=0 ;;
        --out) out=$2; shift ;;
        *) echo "usage: $0 [--no-build] [--out DIR]" >&2; exit 2 ;;
    esac
    shift
done

for tool in cargo cargo-deb rpmbuild objdump gzip; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "build-packages: $tool not found (cargo-deb: cargo install --locked --version 3.8.0 cargo-deb;" \
            "rpmbuild: apt-get install rpm; objdump: apt-get install binutils)" >&2
        exit 1
    fi
done

# The real target directory (CARGO_TARGET_DIR or a config may move it).
target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
    grep -o '"target_directory":"[^"]*"' | sed 's/.*:"//; s/"$//')
release=$target_dir/release
out=${out:-$target_dir/packages}
gen_dir=$release/nodecare-packaging # cargo-deb's assets point here (target/release/nodecare-packaging)
version=$(cargo pkgid --locked -p nodecare-agent | sed 's/.*[#@]//')

if [ "$build" = 1 ]; then
    echo "== cargo build --release --locked (agent, coordinator, cli, generator)"
    cargo build --release --locked \
        -p nodecare-agent -p nodecare-coordinator -p nodecare-cli -p nodecare-packaging-gen
fi
for bin in nodecare-agent nodecare-coordinator nodecare nodecare-packaging-gen; do
    [ -x "$release/$bin" ] || { echo "build-packages: $release/$bin missing (build first)" >&2; exit 1; }
done

echo "== man pages and completions -> $gen_dir"
rm -rf "$gen_dir"
"$release/nodecare-packaging-gen" "$gen_dir" >/dev/null
gzip -9n "$gen_dir"/man/*.[18]

# The glibc floor is the newest GLIBC_x symbol version the binaries import; it goes into both
# packages' dependencies (the .deb gets it from dpkg-shlibdeps through cargo-deb's $auto).
glibc_floor=$(for bin in nodecare-agent nodecare-coordinator nodecare; do
    objdump -T "$release/$bin" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//'
done | sort -uV | tail -n 1)
echo "== glibc floor: $glibc_floor"

mkdir -p "$out"
rm -f "$out"/nodecare-agent[_-]*.deb "$out"/nodecare-coordinator[_-]*.deb \
    "$out"/nodecare-agent-*.rpm "$out"/nodecare-coordinator-*.rpm

echo "== cargo deb"
for pkg in nodecare-agent nodecare-coordinator; do
    cargo deb --locked --no-build -p "$pkg" --output "$out/"
done

echo "== rpmbuild"
stage_root=$target_dir/rpm-stage
rm -rf "$stage_root"
stage() { # stage PACKAGE MODE SOURCE DEST
    install -D -m "$2" "$3" "$stage_root/$1$4"
}
a=nodecare-agent
stage $a 0755 "$release/nodecare-agent" /usr/bin/nodecare-agent
stage $a 0644 packaging/config/agent.toml /etc/nodecare/agent.toml
stage $a 0644 packaging/systemd/nodecare-agent.service /usr/lib/systemd/system/nodecare-agent.service
for page in "$gen_dir"/man/nodecare-agent*.8.gz; do
    stage $a 0644 "$page" "/usr/share/man/man8/$(basename "$page")"
done
stage $a 0644 "$gen_dir/completions/nodecare-agent.bash" /usr/share/bash-completion/completions/nodecare-agent
stage $a 0644 "$gen_dir/completions/_nodecare-agent" /usr/share/zsh/site-functions/_nodecare-agent
stage $a 0644 "$gen_dir/completions/nodecare-agent.fish" /usr/share/fish/vendor_completions.d/nodecare-agent.fish
stage $a 0644 whitelist-examples/README.md /usr/share/nodecare/examples/README.md
for kind in diagnose repair; do
    install -d -m 0755 "$stage_root/$a/usr/share/nodecare/examples/$kind"
    for script in whitelist-examples/$kind/*; do
        [ -f "$script" ] || continue
        stage $a 0644 "$script" "/usr/share/nodecare/examples/$kind/$(basename "$script")"
    done
    install -d -m 0755 "$stage_root/$a/etc/ganeti/node-$kind-commands"
done
install -d -m 0750 "$stage_root/$a/var/lib/nodecare/agent"

c=nodecare-coordinator
stage $c 0755 "$release/nodecare-coordinator" /usr/bin/nodecare-coordinator
stage $c 0755 "$release/nodecare" /usr/bin/nodecare
stage $c 0640 packaging/config/coordinator.toml /etc/nodecare/coordinator.toml
stage $c 0644 packaging/systemd/nodecare-coordinator.service /usr/lib/systemd/system/nodecare-coordinator.service
for page in "$gen_dir"/man/nodecare-coordinator*.8.gz "$gen_dir"/man/nodecare*.1.gz; do
    name=$(basename "$page" .gz)
    section=${name##*.}
    stage $c 0644 "$page" "/usr/share/man/man$section/$(basename "$page")"
done
for bin in nodecare-coordinator nodecare; do
    stage $c 0644 "$gen_dir/completions/$bin.bash" "/usr/share/bash-completion/completions/$bin"
    stage $c 0644 "$gen_dir/completions/_$bin" "/usr/share/zsh/site-functions/_$bin"
    stage $c 0644 "$gen_dir/completions/$bin.fish" "/usr/share/fish/vendor_completions.d/$bin.fish"
done
stage $c 0644 packaging/prometheus/nodecare.rules.yml /usr/share/nodecare/prometheus/nodecare.rules.yml
stage $c 0644 packaging/grafana/nodecare.json /usr/share/nodecare/grafana/nodecare.json
install -d -m 0755 "$stage_root/$c/var/lib/nodecare"

rpm_top=$target_dir/rpmbuild
for pkg in nodecare-agent nodecare-coordinator; do
    rm -rf "$rpm_top"
    rpmbuild -bb --quiet \
        --define "_topdir $rpm_top" \
        --define "_rpmdir $out" \
        --define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm" \
        --define "stagedir $stage_root/$pkg" \
        --define "pkgversion $version" \
        --define "glibc_floor $glibc_floor" \
        "packaging/rpm/$pkg.spec"
done
rm -rf "$rpm_top"

echo "== packages in $out"
ls -l "$out"
for deb in "$out"/*.deb; do
    dpkg-deb --field "$deb" Package Version Depends
done
for rpm_file in "$out"/*.rpm; do
    rpm -K --nosignature "$rpm_file"
done
cd "$root"
