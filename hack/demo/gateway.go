package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// echoText is what the demo asks the stdio fixture to echo through the gateway.
const echoText = "hello from the gateway"

// useGateway does what an agent would: connects to the manager's MCP gateway
// for the samples' namespace, lists the tools (mcp__<serverName>__<tool>)
// and calls the stdio fixture's echo tool.
func (d *demo) useGateway(ctx context.Context, set *sampleSet) error {
	prefixes := map[string]string{} // "mcp__<serverName>__" -> serverName
	var echo string
	for _, n := range set.names {
		s, err := d.get(ctx, n)
		if err != nil {
			return err
		}
		prefixes["mcp__"+s.Status.ServerName+"__"] = s.Status.ServerName
		if n == set.stdioFixture {
			echo = "mcp__" + s.Status.ServerName + "__echo"
		}
	}

	url := fmt.Sprintf("http://%s/namespaces/%s/mcp", d.gateway, namespace)
	d.say("Listing tools through the MCP gateway at %s", url)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpbridge-demo", Version: "v0"}, nil)
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		return fmt.Errorf("connecting to the gateway: %w", err)
	}
	defer sess.Close()

	var names []string
	perServer := map[string]int{}
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("listing tools through the gateway: %w", err)
		}
		names = append(names, t.Name)
		server, longest := "?", 0 // serverNames may hold "_": the longest prefix wins
		for p, s := range prefixes {
			if strings.HasPrefix(t.Name, p) && len(p) > longest {
				server, longest = s, len(p)
			}
		}
		perServer[server]++
	}
	slices.Sort(names)
	var servers []string
	for s, n := range perServer {
		servers = append(servers, fmt.Sprintf("%s (%d)", s, n))
	}
	slices.Sort(servers)
	fmt.Fprintf(d.out, "    %d tools from %d servers: %s\n", len(names), len(perServer), strings.Join(servers, ", "))
	if len(names) > 5 {
		names = append(names[:5], "...")
	}
	fmt.Fprintf(d.out, "    %s\n", strings.Join(names, ", "))

	d.say("Calling %s through the gateway", echo)
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: echo, Arguments: map[string]any{"text": echoText}})
	if err != nil {
		return fmt.Errorf("calling %s through the gateway: %w", echo, err)
	}
	var text []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			text = append(text, t.Text)
		}
	}
	if res.IsError {
		return fmt.Errorf("%s failed: %s", echo, strings.Join(text, " "))
	}
	fmt.Fprintf(d.out, "    result: %s\n", strings.Join(text, " "))
	return nil
}
