# syntax=docker/dockerfile:1
# wasp's image: one static binary and the iptables tools, for deploy/'s
# DaemonSet.
#
#   docker build -t registry.example.com/wasp:0.1.0 --build-arg VERSION=0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 -t ... --push .
#
# deploy/deploy_test.go checks that the Go version is go.mod's and that the
# binary is where the DaemonSet runs it.

# The builder runs on the build machine's platform and cross-compiles.
FROM --platform=$BUILDPLATFORM golang:1.26.8 AS build
ARG TARGETOS=linux
ARG TARGETARCH
# VERSION, if given, is what wasp version prints and the apiserver sees in
# the user agent. Modules are checked against the host's ABI version, which
# it does not change.
ARG VERSION=
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# CGO_ENABLED=0: a static binary, for an image without a C library.
# -tags grpcnotrace: see BUILD_TAGS in the Makefile. The
# default Wasm modules are embedded, checked in and reproducible, so no
# wasip1 build happens here.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    ldflags="-s -w"; \
    if [ -n "$VERSION" ]; then ldflags="$ldflags -X main.version=$VERSION"; fi; \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false -tags grpcnotrace -ldflags "$ldflags" -o /out/wasp ./cmd/wasp

# debian:12-slim with Debian's iptables package: wasp's iptables mode runs
# iptables-restore, and the node may use either variant, so the image has
# both (iptables-nft and iptables-legacy, with ip6tables); wasp picks the
# node's as kube-proxy's image does. nftables mode, the conntrack cleanup
# and the node set-up speak netlink and need no binary. The root user, not
# a non-root one: wasp programs the host's netfilter and conntrack, which
# takes CAP_NET_ADMIN (and CAP_NET_RAW for iptables-legacy), and a
# container's added capabilities are in effect only for user 0. The
# DaemonSet drops every other capability and makes the root file system
# read-only; /run/xtables.lock is mounted from the node.
FROM debian:12-slim AS wasp
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iptables \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*
COPY --from=build /out/wasp /usr/local/bin/wasp
USER 0:0
ENTRYPOINT ["/usr/local/bin/wasp"]
