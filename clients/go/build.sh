#!/bin/sh
# Builds and tests the Go client offline, from Debian's Go packages only
# (golang-go 1.19, golang-github-jackc-pgx-v4-dev under /usr/share/gocode).
#
#   clients/go/build.sh            build bin/le-conformance-probe and bin/example
#   clients/go/build.sh test ARGS  go test of the package (ARGS go to go test)
#   clients/go/build.sh vet        go vet of every package
#
# GOPATH mode (GO111MODULE=off): the package is linked into a private GOPATH
# as import path "leaderelection", next to Debian's /usr/share/gocode; no
# module proxy or network is used (GOPROXY=off).
set -e
here=$(cd "$(dirname "$0")" && pwd)
gp=${LE_GO_GOPATH:-$here/.gopath}
mkdir -p "$gp/src"
ln -sfn "$here" "$gp/src/leaderelection"
GO111MODULE=off GOPATH="$gp:/usr/share/gocode" GOPROXY=off GOFLAGS=
export GO111MODULE GOPATH GOPROXY GOFLAGS
# the user's build cache when there is one and it is writable (faster
# rebuilds), else a private one
c=$(go env GOCACHE 2>/dev/null || true)
case $c in
''|off) c= ;;
*) mkdir -p "$c" 2>/dev/null && [ -w "$c" ] || c= ;;
esac
if [ -z "$c" ]; then
	GOCACHE=$gp/cache
	export GOCACHE
fi
pkgs="leaderelection leaderelection/example leaderelection/cmd/le-conformance-probe"
case ${1:-build} in
build)
	mkdir -p "$here/bin"
	go build -o "$here/bin/le-conformance-probe" leaderelection/cmd/le-conformance-probe
	go build -o "$here/bin/example" leaderelection/example ;;
test) shift; go test "$@" leaderelection ;;
vet) go vet $pkgs ;;
*) echo "usage: $0 [build|test [ARGS]|vet]" >&2; exit 2 ;;
esac
