# featureplug's container image: `make image` builds it with docker or
# podman; the manifests run ghcr.io/featureplug/featureplug:<version>.
#
# go-nvml needs cgo, so the binary links glibc dynamically (it dlopens
# libnvidia-ml.so.1 at run time) and the runtime image must carry glibc:
# distroless/base (glibc, CA certificates, no shell or package manager).
# The image has no NVIDIA library: NVML comes from the NVIDIA container
# runtime (runtimeClassName: nvidia) or from a host driver root mounted at
# /host (--driver-root=/host); see docs/deployment.md.

ARG GO_VERSION=1.26
# Debian 12 in both stages, so the glibc the binary is built against is the
# one it runs with.
FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=1 \
    CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations"
# Modules first: a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The build context has no .git (.dockerignore), so the commit comes as
# an argument (make image passes it), with the build date.
ARG VERSION=dev
ARG COMMIT=
ARG BUILD_DATE=
# noclaimexplain: the agent does not link CEL, which only rules explain
# --claim needs (docs/deployment.md).
RUN go build -trimpath -tags noclaimexplain -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT} -X main.buildDate=${BUILD_DATE}" -o /out/featureplug ./cmd/featureplug

FROM gcr.io/distroless/base-debian12
# Root (the image's default user): the kubelet's device-plugin directory
# belongs to root. The manifests drop every capability and make the root
# filesystem read-only.
COPY --from=build /out/featureplug /usr/bin/featureplug
ENTRYPOINT ["/usr/bin/featureplug"]
CMD ["run"]
