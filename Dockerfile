# syntax=docker/dockerfile:1
# wasp's image: one static binary on distroless, for deploy/'s DaemonSet.
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

# distroless/static: no shell, no package manager, no C library; CA
# certificates and /etc/passwd only. Its root variant, not :nonroot: wasp
# programs the host's nftables and conntrack, which takes CAP_NET_ADMIN, and
# a container's added capabilities are in effect only for user 0. The
# DaemonSet drops every other capability and makes the root file system
# read-only.
#
# No iptables or nft binaries: wasp's nftables mode speaks netlink itself,
# and so do the conntrack cleanup and the node set-up. An iptables mode, if
# one is ever written, would need a stage with iptables (and its
# /run/xtables.lock mounted from the node).
FROM gcr.io/distroless/static-debian12 AS wasp
COPY --from=build /out/wasp /usr/local/bin/wasp
USER 0:0
ENTRYPOINT ["/usr/local/bin/wasp"]
