package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"runtime/pprof"
	"time"
)

// modeProxy is the target of -floor: the agent's requests pass through
// httputil.ReverseProxy to the fixture, so the agent's session is the
// fixture's own. The gap between it and direct is what one more net/http
// server and client cost on this machine, the part of the gateway's added
// latency that no change to the gateway's own code removes.
const modeProxy = "proxy"

// startProxy serves a reverse proxy to upstream on a loopback port; its
// goroutines carry role=proxy in the CPU profile. stop closes it.
func startProxy(upstream string) (endpoint string, stop func(), err error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return "", nil, err
	}
	target := &url.URL{Scheme: u.Scheme, Host: u.Host}
	rp := httputil.NewSingleHostReverseProxy(target)
	// Stream every answer as it comes (SSE), and keep as many idle
	// upstream connections as the agents use.
	rp.FlushInterval = -1
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 128, IdleConnTimeout: time.Minute}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	pprof.Do(context.Background(), pprof.Labels("role", "proxy"), func(context.Context) {
		go func() { _ = srv.Serve(ln) }()
	})
	return fmt.Sprintf("http://%s%s", ln.Addr(), u.Path), func() { _ = srv.Close() }, nil
}

// modeRelay is the other target of -floor: a TCP relay that copies bytes
// between the agent's connection and one of its own to the fixture, without
// reading HTTP at all: the least one more hop can cost.
const modeRelay = "relay"

// startRelay relays every connection to upstream's host on a loopback port.
func startRelay(upstream string) (endpoint string, stop func(), err error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	pprof.Do(context.Background(), pprof.Labels("role", "proxy"), func(context.Context) {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go relay(c, u.Host)
			}
		}()
	})
	return fmt.Sprintf("http://%s%s", ln.Addr(), u.Path), func() { _ = ln.Close() }, nil
}

func relay(c net.Conn, host string) {
	defer c.Close()
	up, err := net.Dial("tcp", host)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{})
	go func() { _, _ = io.Copy(up, c); _ = up.(*net.TCPConn).CloseWrite(); close(done) }()
	_, _ = io.Copy(c, up)
	<-done
}
