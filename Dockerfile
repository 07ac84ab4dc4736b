# syntax=docker/dockerfile:1
# Build: docker build -t IMG .            (the manager alone, distroless)
#        docker build --target node -t IMG-node .   (adds Node.js for npx-launched stdio servers)

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/manager ./cmd/manager
# The shim: the entrypoint of every Pod-runtime stdio server. An init
# container runs `/shim install DEST` from this image (there is no cp).
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/shim ./cmd/shim
# A minimal init as PID 1: it reaps orphans that leave their process group
# (the manager itself reaps its stdio servers' groups as a subreaper).
RUN apt-get update && apt-get install -y --no-install-recommends tini \
    && cp /usr/bin/tini-static /out/tini

# The manager with Node.js, for McpServers whose stdio command is npx or node.
# Kept before the default target so that a plain `docker build` ends on it last.
# distroless has no npm/npx, so this target starts from the slim Node image.
FROM node:22-bookworm-slim AS node
COPY --from=build /out/manager /manager
COPY --from=build /out/shim /shim
COPY --from=build /out/tini /tini
ENV HOME=/tmp NPM_CONFIG_CACHE=/tmp/.npm
USER 1000:1000
ENTRYPOINT ["/tini", "--", "/manager"]

FROM gcr.io/distroless/static-debian12:nonroot AS manager
COPY --from=build /out/manager /manager
COPY --from=build /out/shim /shim
COPY --from=build /out/tini /tini
USER 65532:65532
ENTRYPOINT ["/tini", "--", "/manager"]
