package registry

import (
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// encodedSet is a tool set published by SwapEncoded: its tools are
// decoded, and copied as Swap copies them, on the first Upstream of any of
// them, and kept from then on.
type encodedSet struct {
	decode func() ([]*mcp.Tool, error)

	once  sync.Once
	byRaw map[string]*mcp.Tool // by raw name; nil until decoded, or if that failed
}

// tool is the set's tool named raw, or nil if the set could not be decoded
// again (a decode that differs from the one published, which callers of
// SwapEncoded rule out).
func (s *encodedSet) tool(raw string) *mcp.Tool {
	s.once.Do(s.load)
	return s.byRaw[raw]
}

func (s *encodedSet) load() {
	tools, err := s.decode()
	if err != nil {
		return
	}
	byRaw := make(map[string]*mcp.Tool, len(tools))
	for _, t := range tools {
		if t == nil {
			continue
		}
		up, err := regCopy(t)
		if err != nil {
			return
		}
		byRaw[up.Name] = up
	}
	s.decode, s.byRaw = nil, byRaw // the encoding is not needed any more
}
