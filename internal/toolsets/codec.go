package toolsets

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/internal/registry"
)

// MaxCompressedBytes bounds an McpToolSet's compressed tools: the API
// stores them base64-encoded within its field's limit of 1 MiB, well
// under what one object may hold. See docs/design.md, "Replicas and
// ownership" (size limits).
const MaxCompressedBytes = 768 << 10

// maxDecodedBytes bounds what Decode inflates, whoever wrote the object.
const maxDecodedBytes = 64 << 20

// TooLargeError reports tools that do not fit an McpToolSet.
type TooLargeError struct{ Compressed int }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the server's tools take %d KiB compressed, over the %d KiB an McpToolSet carries to the other replicas",
		e.Compressed>>10, MaxCompressedBytes>>10)
}

// Encoded is a tool list as an McpToolSet holds it.
type Encoded struct {
	Gzip   []byte
	Digest string // SHA-256 of the JSON, hex
	Count  int32
}

// A gzip writer allocates about a megabyte of compressor state, and a
// reader tens of kilobytes: both are reused, as a fleet's McpToolSets are
// written and read by the thousand (docs/design.md, "Replicas and
// ownership": memory).
var (
	gzipWriters = sync.Pool{New: func() any {
		zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
		return zw
	}}
	gzipReaders sync.Pool
)

// Encode compresses the upstream entries of tools, in their order (the
// registry's, by public name), so that equal sets encode alike.
func Encode(tools []registry.Tool) (Encoded, error) {
	ups := make([]*mcp.Tool, len(tools))
	for i := range tools {
		ups[i] = tools[i].Upstream()
	}
	raw, err := json.Marshal(ups)
	if err != nil {
		return Encoded{}, fmt.Errorf("encode the tools: %w", err)
	}
	sum := sha256.Sum256(raw)
	var buf bytes.Buffer
	zw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(zw)
	zw.Reset(&buf)
	_, _ = zw.Write(raw)
	if err := zw.Close(); err != nil {
		return Encoded{}, err
	}
	if buf.Len() > MaxCompressedBytes {
		return Encoded{}, &TooLargeError{Compressed: buf.Len()}
	}
	return Encoded{Gzip: buf.Bytes(), Digest: hex.EncodeToString(sum[:]), Count: int32(len(tools))}, nil
}

// Decode is the tool list Encode compressed; nothing is an empty list.
func Decode(gz []byte) ([]*mcp.Tool, error) {
	if len(gz) == 0 {
		return nil, nil
	}
	zr, _ := gzipReaders.Get().(*gzip.Reader)
	var err error
	if zr == nil {
		zr, err = gzip.NewReader(bytes.NewReader(gz))
	} else {
		err = zr.Reset(bytes.NewReader(gz))
	}
	if err != nil {
		return nil, fmt.Errorf("decode the tools: %w", err)
	}
	defer gzipReaders.Put(zr)
	raw, err := io.ReadAll(io.LimitReader(zr, maxDecodedBytes+1))
	if err != nil {
		return nil, fmt.Errorf("decode the tools: %w", err)
	}
	if len(raw) > maxDecodedBytes {
		return nil, fmt.Errorf("decode the tools: more than %d MiB", maxDecodedBytes>>20)
	}
	// Schemas stay JSON: as maps they would take many times the bytes.
	var tools []*registry.ToolJSON
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, fmt.Errorf("decode the tools: %w", err)
	}
	decoded, err := registry.DecodedTools(tools)
	if err != nil {
		return nil, fmt.Errorf("decode the tools: %w", err)
	}
	return decoded, nil
}
