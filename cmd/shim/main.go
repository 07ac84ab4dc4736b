// Command shim is the entrypoint of a stdio MCP server's container: it
// serves authenticated stdio tunnels and starts the server's command once
// per tunnel (package internal/shim). It is a static binary shipped in the
// operator's image; an init container copies it into the Pod with
// `shim install DEST`.
//
//	shim install DEST
//	shim [--listen=:7420] --token-file=PATH --tls-cert-file=PATH --tls-key-file=PATH [--terminate-grace=1.5s] -- COMMAND [ARG...]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/mcpbridge/operator/internal/proc"
	"github.com/mcpbridge/operator/internal/shim"
	"github.com/mcpbridge/operator/internal/shim/tunnel"
)

const usage = `Usage:
  shim install DEST
      copy this binary to DEST (for an init container; the image has no cp)
  shim [flags] -- COMMAND [ARG...]
      serve stdio tunnels to COMMAND, one fresh process per tunnel

Flags:
`

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "install" {
		if len(args) != 2 {
			fmt.Fprintln(stderr, "shim: usage: shim install DEST")
			return 2
		}
		if err := shim.Install(args[1]); err != nil {
			fmt.Fprintln(stderr, "shim:", err)
			return 1
		}
		return 0
	}
	fs := flag.NewFlagSet("shim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", ":"+strconv.Itoa(tunnel.DefaultPort), "listen on `ADDR`")
	tokenFile := fs.String("token-file", "", "read the tunnel token from `PATH` (required)")
	certFile := fs.String("tls-cert-file", "", "serve TLS with the certificate (PEM) at `PATH` (required)")
	keyFile := fs.String("tls-key-file", "", "serve TLS with the private key (PEM) at `PATH` (required)")
	grace := fs.Duration("terminate-grace", shim.DefaultTerminateGrace, "wait between a tunnel's end, SIGTERM and SIGKILL to its process group")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("logger", "shim")
	token, err := shim.ReadToken(*tokenFile)
	if err != nil {
		log.Error("cannot start", "error", err.Error())
		return 2
	}
	cert, err := shim.LoadKeyPair(*certFile, *keyFile)
	if err != nil {
		log.Error("cannot start", "error", err.Error())
		return 2
	}
	srv, err := shim.NewServer(shim.Config{
		Command: fs.Args(), Token: token, Certificate: cert, TerminateGrace: *grace, ReapOrphans: true, Log: log,
	})
	if err != nil {
		log.Error("cannot start", "error", err.Error())
		return 2
	}
	if err := proc.BecomeSubreaper(); err != nil && os.Getpid() != 1 {
		log.Warn("cannot adopt orphaned grandchildren; they may stay zombies", "error", err.Error())
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Error("cannot listen", "error", err.Error())
		return 1
	}
	log.Info("listening", "addr", ln.Addr().String(), "command", fs.Args()[0], "terminateGrace", grace.String())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := srv.Serve(ctx, ln); err != nil {
		log.Error("serve", "error", err.Error())
		return 1
	}
	log.Info("stopped")
	return 0
}
