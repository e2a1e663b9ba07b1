# syntax=docker/dockerfile:1
# Build: docker build -t switchyard .
# Run:   docker run -p 8800:8800 -v switchyard-data:/data switchyard

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# A static binary: the SQLite driver is pure Go, so cgo is not needed.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/switchyard ./cmd/switchyard \
    && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/switchyard /usr/local/bin/switchyard
# nonroot is uid 65532; /data is where SQLite lives unless --database-url is
# set, owned by it so that a fresh volume mounted there is writable.
COPY --from=build --chown=65532:65532 /out/data /data
WORKDIR /data
USER nonroot:nonroot
ENV SWITCHYARD_DATA_DIR=/data SWITCHYARD_LISTEN=:8800
EXPOSE 8800
ENTRYPOINT ["/usr/local/bin/switchyard"]
CMD ["serve"]
