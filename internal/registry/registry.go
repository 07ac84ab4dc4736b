package registry

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool is one published tool.
//
// Values handed out by the Registry are shared snapshots: callers must not
// mutate a Tool's Upstream (copy the mcp.Tool struct before changing a field,
// e.g. to set Name to the public name).
type Tool struct {
	Name       string // public name
	RawName    string // the name the server listed; the only name sent upstream
	ServerName string // effective serverName of the owner
	Owner      string // the resource that published it, e.g. "ns/name"
	// ParamHeaders: the input schema binds a parameter to an HTTP header
	// (x-mcp-header), found once at publish so that no reader has to
	// marshal the schema again to tell.
	ParamHeaders bool
	// ObjectInput: the input schema is an object schema (ObjectInput), as
	// MCP requires; the gateway serves no other tool.
	ObjectInput bool

	upstream *mcp.Tool   // published by Swap
	encoded  *encodedSet // or published by SwapEncoded: decoded on first use
}

// Upstream is the tool as the server listed it (its Name is RawName),
// never mutated after publish; nil for a Tool the registry did not hand
// out. A tool published by SwapEncoded is decoded on the first call for
// any tool of its set.
func (t Tool) Upstream() *mcp.Tool {
	if t.encoded != nil {
		return t.encoded.tool(t.RawName)
	}
	return t.upstream
}

// SameEntry: t and u are one published entry, the same public name with
// the same definition, which a swap that leaves a tool equal keeps; a
// reader that served t need not serve u again.
func (t Tool) SameEntry(u Tool) bool {
	return t.Name == u.Name && t.RawName == u.RawName && t.upstream == u.upstream && t.encoded == u.encoded
}

// ConflictError reports that a public name in the new set is held by another
// owner, or that two raw names in the set map to one public name (then HeldBy
// is the swapping owner itself).
type ConflictError struct {
	PublicName string
	RawName    string
	HeldBy     string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("tool %q would be published as %q, already held by %s", e.RawName, e.PublicName, e.HeldBy)
}

// Registry is the per-namespace tool registry. It is safe for
// concurrent use. Readers receive immutable snapshots and hold no lock once a
// method returns.
// See docs/design.md, "Tool registry and names".
type Registry struct {
	// MaxToolBytesPerNamespace bounds the published tools of a namespace,
	// all servers together, as JSON; zero is DefaultMaxToolBytesPerNamespace.
	// Set it before the registry is used.
	MaxToolBytesPerNamespace int64
	// Shared, when set, is the registry that serves every replica's tools
	// (the mirror of the McpToolSets): what it holds of a namespace beyond
	// this registry's own tools counts toward the budget too, so that the
	// replicas together keep one budget per namespace. Set it before the
	// registry is used. See docs/design.md, "Replicas and ownership".
	Shared *Registry

	mu         sync.RWMutex
	namespaces map[string]*regNamespace
	subs       map[*Subscription]struct{}
}

// regNamespace is the state of one namespace.
type regNamespace struct {
	owners map[string]*regOwner
	byName map[string]regSlot // public name -> where it lives
	// snapshot is the namespace's tools sorted by public name. It is rebuilt
	// lazily (by the first Tools call after a change) into a new slice; a
	// published snapshot is never written again.
	snapshot      []Tool
	snapshotValid bool
	bytes         int64 // of every owner's tools, as JSON
}

// regOwner is one owner's published set.
type regOwner struct {
	name       string
	serverName string
	caller     Caller
	tools      []Tool              // sorted by public name; shared with readers, never written after publish
	digests    [][sha256.Size]byte // SHA-256 of the canonical JSON of tools[i].Upstream
	bytes      int64               // of the canonical JSON of all tools
}

type regSlot struct {
	owner *regOwner
	idx   int
}

// New returns an empty registry.
func New() *Registry {
	return &Registry{
		namespaces: make(map[string]*regNamespace),
		subs:       make(map[*Subscription]struct{}),
	}
}

// Swap replaces owner's whole set in namespace ns in one atomic step: a reader
// sees either the previous set or the new one, never a mix and never an empty
// set in between.
//
// The swap is refused (err != nil, nothing changed, the previous set and
// caller kept) when a tool is nil, a raw name is listed twice, a tool cannot
// be JSON-encoded, or a public name is held by another owner or by two raw
// names of the set (*ConflictError), or when the namespace's published
// tools would grow past MaxToolBytesPerNamespace (*ToolBudgetError).
//
// Entries equal to the owner's current ones keep their Upstream, so that
// readers that compare it see only what changed.
//
// Published tools are deep copies (by JSON round trip) of the given tools, so
// the caller may reuse them; their schemas and _meta members are published
// as json.RawMessage in canonical form (canonicalJSON: compact, the members
// of every object in name order, numbers as the server wrote them).
//
// changed reports whether the published tools of ns changed; only then are
// subscribers signalled. A set equal to the current one (same public names,
// same tools by canonical JSON, same serverName) gives changed=false and keeps
// the current entries as they are, but caller replaces the previous Caller, so
// a reconnect can hand in its new session without disturbing readers.
//
// An empty set is allowed (a server with zero tools): it leaves an owner entry
// without tools, which publishes nothing, like Remove.
func (r *Registry) Swap(ns, owner, serverName string, tools []*mcp.Tool, caller Caller) (changed bool, err error) {
	return r.swap(ns, owner, serverName, tools, nil, caller)
}

// SwapEncoded is Swap for a set that the publisher holds encoded and can
// decode again: the registry keeps decode in place of its copies of the
// tools, and calls it once, on the first Upstream of a tool of the set.
// decode must give the tools that tools are (the same encoding decoded
// again). A registry that lists every tool of a cluster then holds, for the
// namespaces no reader lists, the names it looks tools up by and the
// encoding; see docs/design.md, "Replicas and ownership": memory.
func (r *Registry) SwapEncoded(ns, owner, serverName string, tools []*mcp.Tool, decode func() ([]*mcp.Tool, error), caller Caller) (changed bool, err error) {
	return r.swap(ns, owner, serverName, tools, &encodedSet{decode: decode}, caller)
}

func (r *Registry) swap(ns, owner, serverName string, tools []*mcp.Tool, enc *encodedSet, caller Caller) (changed bool, err error) {
	// Encoding and naming are done before taking the lock.
	next, digests, size, err := regPrepare(owner, serverName, tools, r.owned(ns, owner))
	if err != nil {
		return false, err
	}
	if enc != nil {
		for i := range next {
			next[i].upstream, next[i].encoded = nil, enc
		}
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	st := r.namespaces[ns]
	var cur *regOwner
	if st != nil {
		cur = st.owners[owner]
		for _, t := range next {
			if slot, ok := st.byName[t.Name]; ok && slot.owner.name != owner {
				return false, &ConflictError{PublicName: t.Name, RawName: t.RawName, HeldBy: slot.owner.name}
			}
		}
	}
	if st == nil {
		st = &regNamespace{owners: make(map[string]*regOwner), byName: make(map[string]regSlot)}
		r.namespaces[ns] = st
	}

	if cur != nil && regSameSet(cur, next, digests) {
		cur.caller = caller
		cur.serverName = serverName
		return false, nil
	}
	if err := r.checkBudget(ns, st, cur, size); err != nil {
		if len(st.owners) == 0 {
			delete(r.namespaces, ns)
		}
		return false, err
	}

	changed = cur != nil && len(cur.tools) > 0 || len(next) > 0
	if cur != nil {
		st.bytes -= cur.bytes
		for _, t := range cur.tools {
			delete(st.byName, t.Name)
		}
		regKeepUnchanged(cur, next, digests)
	}
	st.bytes += size
	o := &regOwner{name: owner, serverName: serverName, caller: caller, tools: next, digests: digests, bytes: size}
	st.owners[owner] = o
	for i, t := range next {
		st.byName[t.Name] = regSlot{owner: o, idx: i}
	}
	if changed {
		st.snapshotValid = false
		st.snapshot = nil
		r.notifyLocked(ns)
	}
	return changed, nil
}

// owned is the entry of owner in ns, nil if it has none. Its tools and
// digests are never written after publish, so they may be read without
// the lock.
func (r *Registry) owned(ns, owner string) *regOwner {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if st := r.namespaces[ns]; st != nil {
		return st.owners[owner]
	}
	return nil
}

// regPrepare builds the published entries for tools, sorted by public name,
// the digests of their canonical JSON encodings and the size of these. A
// tool that prev (the owner's entry, nil for none) publishes with the same
// canonical JSON is prev's entry again rather than a copy decoded anew: a
// re-sync of a long list, most of it unchanged, decodes only what changed
// (docs/design.md, "Tool sync").
func regPrepare(owner, serverName string, tools []*mcp.Tool, prev *regOwner) ([]Tool, [][sha256.Size]byte, int64, error) {
	type item struct {
		tool   Tool
		digest [sha256.Size]byte
	}
	items := make([]item, 0, len(tools))
	var size int64
	seen := make(map[string]struct{}, len(tools))
	for i, t := range tools {
		if t == nil {
			return nil, nil, 0, fmt.Errorf("tool #%d in the list is nil", i)
		}
		if _, dup := seen[t.Name]; dup {
			return nil, nil, 0, fmt.Errorf("tool %q is listed twice", t.Name)
		}
		seen[t.Name] = struct{}{}

		canonical, err := regCanonical(t)
		if err != nil {
			return nil, nil, 0, err
		}
		size += int64(len(canonical))
		it := item{tool: Tool{Name: PublicName(serverName, t.Name), RawName: t.Name, ServerName: serverName, Owner: owner},
			digest: sha256.Sum256(canonical)}
		if same, ok := prev.entry(it.tool, it.digest); ok {
			it.tool = same
		} else if it.tool.upstream, err = regDecode(t.Name, canonical); err != nil {
			return nil, nil, 0, err
		} else {
			it.tool.ParamHeaders, it.tool.ObjectInput = BindsParamHeaders(it.tool.upstream), ObjectInput(it.tool.upstream)
		}
		items = append(items, it)
	}
	// Stable, so that of two raw names with one public name the one the
	// server listed later is reported.
	slices.SortStableFunc(items, func(a, b item) int { return cmp.Compare(a.tool.Name, b.tool.Name) })
	out := make([]Tool, len(items))
	digests := make([][sha256.Size]byte, len(items))
	for i, it := range items {
		if i > 0 && it.tool.Name == items[i-1].tool.Name {
			return nil, nil, 0, &ConflictError{PublicName: it.tool.Name, RawName: it.tool.RawName, HeldBy: owner}
		}
		out[i] = it.tool
		digests[i] = it.digest
	}
	return out, digests, size, nil
}

// regCanonical is the canonical form of t's JSON (canonicalJSON), which
// the registry's copy of t is decoded from (regDecode) and digested.
func regCanonical(t *mcp.Tool) ([]byte, error) {
	raw, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("tool %q cannot be encoded as JSON: %w", t.Name, err)
	}
	canonical, err := canonicalJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("tool %q cannot be encoded as canonical JSON: %w", t.Name, err)
	}
	return canonical, nil
}

// regDecode is the registry's own copy of the tool name, decoded from its
// canonical JSON: the schemas and each _meta member stay JSON, as ToolJSON
// decodes them, so that the copy costs about its JSON and reading it
// decodes nothing.
func regDecode(name string, canonical []byte) (*mcp.Tool, error) {
	var tj ToolJSON
	if err := json.Unmarshal(canonical, &tj); err != nil {
		return nil, fmt.Errorf("tool %q cannot be decoded from JSON: %w", name, err)
	}
	return tj.Decoded()
}

// regCopy is the registry's own copy of t (regCanonical, then regDecode).
func regCopy(t *mcp.Tool) (*mcp.Tool, error) {
	canonical, err := regCanonical(t)
	if err != nil {
		return nil, err
	}
	return regDecode(t.Name, canonical)
}

// entry is o's entry for t (the same public name, raw name, server name
// and owner) if its canonical JSON has digest.
func (o *regOwner) entry(t Tool, digest [sha256.Size]byte) (Tool, bool) {
	if o == nil {
		return Tool{}, false
	}
	i, ok := slices.BinarySearchFunc(o.tools, t.Name, func(e Tool, name string) int { return cmp.Compare(e.Name, name) })
	if !ok || o.digests[i] != digest {
		return Tool{}, false
	}
	e := o.tools[i]
	return e, e.RawName == t.RawName && e.ServerName == t.ServerName && e.Owner == t.Owner
}

// regKeepUnchanged hands the entries of next that equal cur's (same public
// name, same canonical JSON) cur's Upstream, so that the gateway's views,
// which compare Upstream pointers, re-add only the tools that changed. Both
// are sorted by public name.
func regKeepUnchanged(cur *regOwner, next []Tool, digests [][sha256.Size]byte) {
	i := 0
	for j := range next {
		for i < len(cur.tools) && cur.tools[i].Name < next[j].Name {
			i++
		}
		if i < len(cur.tools) && cur.tools[i].Name == next[j].Name && cur.digests[i] == digests[j] &&
			cur.tools[i].RawName == next[j].RawName {
			next[j].upstream, next[j].encoded = cur.tools[i].upstream, cur.tools[i].encoded
		}
	}
}

// DefaultMaxToolBytesPerNamespace is the default budget of a namespace's
// published tools (docs/design.md, "Budgets" and "Limits").
const DefaultMaxToolBytesPerNamespace = 64 << 20

// FlagMaxToolBytesPerNamespace sets Registry.MaxToolBytesPerNamespace in
// the manager; a refusal names it.
const FlagMaxToolBytesPerNamespace = "--max-tool-bytes-per-namespace"

// ToolBudgetError reports that a tool set was not published because the
// namespace's published tools would pass their budget.
type ToolBudgetError struct {
	Bytes  int64 // of the refused set
	Others int64 // of the rest of the namespace
	Max    int64
}

func (e *ToolBudgetError) Error() string {
	return fmt.Sprintf("the server's tools take %s as JSON and the namespace's other servers publish %s: "+
		"together over the namespace's budget of %s (%s)", size(e.Bytes), size(e.Others), size(e.Max), FlagMaxToolBytesPerNamespace)
}

// size words n bytes in the unit that keeps its digits: a small server's
// tools refused next to a nearly full namespace read "19.5 KiB", not
// "0.0 MiB", and the namespace's "63.99 MiB" is not rounded up to its
// budget's "64.00 MiB".
func size(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
}

// checkBudget refuses a set of size bytes for owner cur (nil: new) of st,
// namespace ns, that would pass the namespace's budget. A set that does
// not grow is never refused, so that a namespace over a lowered budget can
// shrink. The other replicas' tools are what Shared holds beyond this
// registry's: it mirrors this registry's sets too, one watch event after
// they change, so those are left out of it whatever size it has them at.
// Lock order: r.mu is held here and Shared's is taken; Shared never takes
// r's.
func (r *Registry) checkBudget(ns string, st *regNamespace, cur *regOwner, size int64) error {
	var curBytes int64
	if cur != nil {
		curBytes = cur.bytes
	}
	others := st.bytes - curBytes
	if r.Shared != nil {
		others += r.Shared.bytesBeyond(ns, st.owners)
	}
	limit := cmp.Or(r.MaxToolBytesPerNamespace, DefaultMaxToolBytesPerNamespace)
	if size <= curBytes || others+size <= limit {
		return nil
	}
	return &ToolBudgetError{Bytes: size, Others: others, Max: limit}
}

// Fits reports whether a set of size bytes (as ToolBudgetError.Bytes
// counts them) for owner would pass ns's budget now, so that a set refused
// for it need not be fetched again before it would.
func (r *Registry) Fits(ns, owner string, size int64) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	st := r.namespaces[ns]
	if st == nil {
		st = &regNamespace{}
	}
	return r.checkBudget(ns, st, st.owners[owner], size) == nil
}

// bytesBeyond is the size of the tools published in ns by owners other
// than those of mine, as JSON.
func (r *Registry) bytesBeyond(ns string, mine map[string]*regOwner) int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	st := r.namespaces[ns]
	if st == nil {
		return 0
	}
	n := st.bytes
	for name := range mine {
		if o := st.owners[name]; o != nil {
			n -= o.bytes
		}
	}
	return n
}

// CompactSchemas replaces t's decoded schemas with their JSON, as
// encoding/json writes them (keys sorted): the bytes take a fraction of the
// memory of the decoded maps, which a registry would hold for every tool of
// the fleet on every replica, while every reader (the SDK's AddTool, a
// tools/list answer, an McpToolSet) encodes them again anyway. See
// docs/design.md, "Replicas and ownership" (memory).
func CompactSchemas(t *mcp.Tool) error {
	// _meta stays a map, as its type is; each member's value becomes JSON.
	for k, v := range t.Meta {
		if _, done := v.(json.RawMessage); done || v == nil {
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		t.Meta[k] = json.RawMessage(b)
	}
	for _, schema := range []*any{&t.InputSchema, &t.OutputSchema} {
		if *schema == nil {
			continue
		}
		if _, done := (*schema).(json.RawMessage); done {
			continue
		}
		b, err := json.Marshal(*schema)
		if err != nil {
			return err
		}
		*schema = json.RawMessage(b)
	}
	return nil
}

// BindsParamHeaders: t's decoded input schema binds a parameter to an HTTP
// header (x-mcp-header), which the SDK's CallTool sets from the tools its
// own ListTools listed.
func BindsParamHeaders(t *mcp.Tool) bool {
	if raw, ok := t.InputSchema.(json.RawMessage); ok {
		// Most schemas name no such member: the bytes tell without the
		// decoder's tokens, unless an escape could spell the name.
		if !bytes.Contains(raw, []byte(paramHeaderKey)) && bytes.IndexByte(raw, '\\') < 0 {
			return false
		}
		return hasMember(raw, paramHeaderKey)
	}
	return hasKey(t.InputSchema, paramHeaderKey)
}

// paramHeaderKey is the schema member that binds a parameter to a header.
const paramHeaderKey = "x-mcp-header"

// hasMember: key is a member name anywhere in the JSON raw, read token by
// token (decoded into maps, a schema takes many times its JSON).
func hasMember(raw json.RawMessage, key string) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var inObject []bool // per open container
	keyNext := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			inObject = append(inObject, tok == json.Delim('{'))
			keyNext = tok == json.Delim('{')
			continue
		case json.Delim('}'), json.Delim(']'):
			inObject = inObject[:len(inObject)-1]
		default:
			if keyNext {
				if tok == any(key) {
					return true
				}
				keyNext = false
				continue
			}
		}
		// A value ended: in an object, a member name comes next.
		keyNext = len(inObject) > 0 && inObject[len(inObject)-1]
	}
}

// hasKey: key is a member name anywhere in the decoded JSON value v.
func hasKey(v any, key string) bool {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if k == key || hasKey(e, key) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if hasKey(e, key) {
				return true
			}
		}
	}
	return false
}

// regSameSet reports whether next (with digests) publishes exactly what cur
// publishes.
func regSameSet(cur *regOwner, next []Tool, digests [][sha256.Size]byte) bool {
	if len(cur.tools) != len(next) {
		return false
	}
	for i := range next {
		a, b := cur.tools[i], next[i]
		if a.Name != b.Name || a.RawName != b.RawName || a.ServerName != b.ServerName || a.Owner != b.Owner {
			return false
		}
		if cur.digests[i] != digests[i] {
			return false
		}
	}
	return true
}

// Remove unregisters owner's tools in ns and forgets the owner. changed is
// false (and nothing is signalled) if it had no tools.
func (r *Registry) Remove(ns, owner string) (changed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.namespaces[ns]
	if st == nil {
		return false
	}
	cur := st.owners[owner]
	if cur == nil {
		return false
	}
	delete(st.owners, owner)
	st.bytes -= cur.bytes
	for _, t := range cur.tools {
		delete(st.byName, t.Name)
	}
	if len(st.owners) == 0 {
		delete(r.namespaces, ns)
	}
	if len(cur.tools) == 0 {
		return false
	}
	st.snapshotValid = false
	st.snapshot = nil
	r.notifyLocked(ns)
	return true
}

// Tools returns ns's tools sorted by public name. The slice is a shared,
// immutable snapshot: callers must not modify it or the tools' Upstream. A
// later Swap never writes into a returned slice.
func (r *Registry) Tools(ns string) []Tool {
	r.mu.RLock()
	st := r.namespaces[ns]
	if st == nil {
		r.mu.RUnlock()
		return nil
	}
	if st.snapshotValid {
		s := st.snapshot
		r.mu.RUnlock()
		return s
	}
	r.mu.RUnlock()

	r.mu.Lock()
	defer r.mu.Unlock()
	st = r.namespaces[ns]
	if st == nil {
		return nil
	}
	if !st.snapshotValid {
		n := 0
		for _, o := range st.owners {
			n += len(o.tools)
		}
		var s []Tool
		if n > 0 {
			s = make([]Tool, 0, n)
			for _, o := range st.owners {
				s = append(s, o.tools...)
			}
			slices.SortFunc(s, func(a, b Tool) int { return cmp.Compare(a.Name, b.Name) })
		}
		st.snapshot = s
		st.snapshotValid = true
	}
	return st.snapshot
}

// Owned returns owner's tools in ns sorted by public name, as a shared,
// immutable snapshot (see Tools).
func (r *Registry) Owned(ns, owner string) []Tool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	st := r.namespaces[ns]
	if st == nil {
		return nil
	}
	o := st.owners[owner]
	if o == nil || len(o.tools) == 0 {
		return nil
	}
	return o.tools
}

// Lookup finds a tool by public name in ns and the Caller that serves it.
func (r *Registry) Lookup(ns, publicName string) (Tool, Caller, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	st := r.namespaces[ns]
	if st == nil {
		return Tool{}, nil, false
	}
	slot, ok := st.byName[publicName]
	if !ok {
		return Tool{}, nil, false
	}
	return slot.owner.tools[slot.idx], slot.owner.caller, true
}

// Subscription is a coalescing feed of registry changes. C receives a value
// (non-blocking, capacity 1) whenever the published tools of any namespace
// change; any number of changes before the receiver gets to C collapse into
// one pending value. Drain then tells which namespaces changed.
type Subscription struct {
	C <-chan struct{}

	r       *Registry
	c       chan struct{}
	mu      sync.Mutex
	pending map[string]struct{}
	closed  bool
}

// Subscribe returns a new change feed. The registry never blocks on a slow
// subscriber. With Shared, the feed has Shared's changes as well: a set
// refused for the budget is tried again when another replica's tools of
// its namespace change.
func (r *Registry) Subscribe() *Subscription {
	c := make(chan struct{}, 1)
	s := &Subscription{C: c, r: r, c: c, pending: make(map[string]struct{})}
	for _, reg := range r.feeds() {
		reg.mu.Lock()
		reg.subs[s] = struct{}{}
		reg.mu.Unlock()
	}
	return s
}

// feeds are the registries whose changes r's subscribers hear.
func (r *Registry) feeds() []*Registry {
	if r.Shared == nil {
		return []*Registry{r}
	}
	return []*Registry{r, r.Shared}
}

// notifyLocked records that ns changed for every subscriber and signals each
// one without blocking. r.mu must be held for writing.
func (r *Registry) notifyLocked(ns string) {
	for s := range r.subs {
		// Close deregisters under r.mu, so s is open here.
		s.mu.Lock()
		s.pending[ns] = struct{}{}
		select {
		case s.c <- struct{}{}:
		default: // a signal is pending already
		}
		s.mu.Unlock()
	}
}

// Drain returns the namespaces that changed since the last Drain, sorted, and
// consumes a pending signal on C, so a signal on C always has a non-empty
// Drain behind it (unless Drain was already called for it). After Close it
// returns nil.
func (s *Subscription) Drain() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.c:
	default:
	}
	if s.closed || len(s.pending) == 0 {
		return nil
	}
	out := make([]string, 0, len(s.pending))
	for ns := range s.pending {
		out = append(out, ns)
	}
	clear(s.pending)
	slices.Sort(out)
	return out
}

// Close stops delivery. Like time.Ticker.Stop it does not close C, so a
// goroutine selecting on C never sees a spurious signal; a signal pending at
// Close is discarded. Close is idempotent.
func (s *Subscription) Close() {
	for _, reg := range s.r.feeds() {
		reg.mu.Lock()
		delete(reg.subs, s)
		reg.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	clear(s.pending)
	select {
	case <-s.c:
	default:
	}
}

// Caller is the Caller that owner's set in ns was published with, if the
// owner has published one (with or without tools).
func (r *Registry) Caller(ns, owner string) (Caller, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	st := r.namespaces[ns]
	if st == nil {
		return nil, false
	}
	o := st.owners[owner]
	if o == nil || o.caller == nil {
		return nil, false
	}
	return o.caller, true
}
