package main

import (
	"flag"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/mcpbridge/operator/internal/gateway"
	"github.com/mcpbridge/operator/internal/registry"
)

// budgetOptions are the budgets one tenant is held to (docs/design.md, "Budgets" and "Limits"); see
// docs/design.md, "Budgets".
type budgetOptions struct {
	gateway   gateway.Budgets
	toolBytes int64 // published tool bytes per namespace
}

// bindFlags defines the budget flags with their defaults.
func (o *budgetOptions) bindFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.gateway.SessionsPerIdentity, flagName(gateway.FlagMaxSessionsPerIdentity), gateway.DefaultMaxSessionsPerIdentity,
		"Live 2025-11-25 agent sessions one identity may hold in one namespace; one more initialize gets HTTP 429 with Retry-After.")
	fs.IntVar(&o.gateway.SessionsPerNamespace, flagName(gateway.FlagMaxSessionsPerNamespace), gateway.DefaultMaxSessionsPerNamespace,
		"Live 2025-11-25 agent sessions all identities together may hold in one namespace; one more initialize gets HTTP 429 with Retry-After.")
	fs.IntVar(&o.gateway.CallsPerIdentity, flagName(gateway.FlagMaxCallsPerIdentity), gateway.DefaultMaxCallsPerIdentity,
		"tools/call one identity may have in flight in one namespace; one more gets a JSON-RPC error naming this flag.")
	fs.IntVar(&o.gateway.CallsPerNamespace, flagName(gateway.FlagMaxCallsPerNamespace), gateway.DefaultMaxCallsPerNamespace,
		"tools/call all identities together may have in flight in one namespace; one more gets a JSON-RPC error naming this flag.")
	o.gateway.ResultBytesPerNamespace = gateway.DefaultMaxResultBytesPerNamespace
	fs.Var(byteQuantity{&o.gateway.ResultBytesPerNamespace}, flagName(gateway.FlagMaxResultBytesPerNamespace),
		"Bytes of agents' requests, tool results and arguments one namespace may hold in the manager at once (a quantity, e.g. 64Mi); "+
			"a call whose result would pass it gets a JSON-RPC error naming this flag, a request HTTP 429.")
	o.toolBytes = registry.DefaultMaxToolBytesPerNamespace
	fs.Var(byteQuantity{&o.toolBytes}, flagName(registry.FlagMaxToolBytesPerNamespace),
		"Bytes of published tools (as JSON, schemas included) of all McpServers of one namespace (a quantity, e.g. 64Mi); "+
			"a server whose tools would pass it keeps its previous set (or publishes none) and says why in its status (ToolBudgetExceeded).")
}

func (o *budgetOptions) validate() error {
	for _, b := range []struct {
		flag string
		v    int64
	}{
		{gateway.FlagMaxSessionsPerIdentity, int64(o.gateway.SessionsPerIdentity)},
		{gateway.FlagMaxSessionsPerNamespace, int64(o.gateway.SessionsPerNamespace)},
		{gateway.FlagMaxCallsPerIdentity, int64(o.gateway.CallsPerIdentity)},
		{gateway.FlagMaxCallsPerNamespace, int64(o.gateway.CallsPerNamespace)},
		{gateway.FlagMaxResultBytesPerNamespace, o.gateway.ResultBytesPerNamespace},
		{registry.FlagMaxToolBytesPerNamespace, o.toolBytes},
	} {
		if b.v <= 0 {
			return fmt.Errorf("%s must be positive, not %d", b.flag, b.v)
		}
	}
	return nil
}

// byteQuantity is a flag of a number of bytes written as a Kubernetes
// quantity (64Mi, 1G, 1048576), as a chart value would be.
type byteQuantity struct{ n *int64 }

func (q byteQuantity) String() string {
	if q.n == nil {
		return ""
	}
	return resource.NewQuantity(*q.n, resource.BinarySI).String()
}

func (q byteQuantity) Set(s string) error {
	v, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("not a quantity of bytes such as 64Mi: %w", err)
	}
	n, ok := v.AsInt64()
	if !ok {
		return fmt.Errorf("%q is not a whole number of bytes", s)
	}
	*q.n = n
	return nil
}
