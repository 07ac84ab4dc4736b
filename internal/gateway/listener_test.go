package gateway

import (
	"errors"
	"net"
	"testing"
	"time"
)

func TestListenWhenServingBindsOnFirstAccept(t *testing.T) {
	l := ListenWhenServing("127.0.0.1:0")
	if got := l.Addr().String(); got != "127.0.0.1:0" {
		t.Fatalf("Addr before Accept = %q: bound too early", got)
	}
	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for l.Addr().String() == "127.0.0.1:0" {
		if time.Now().After(deadline) {
			t.Fatal("Accept did not bind")
		}
		time.Sleep(time.Millisecond)
	}
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("dial the bound address: %v", err)
	}
	c.Close()
	if err := <-accepted; err != nil {
		t.Fatalf("Accept: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Accept(); err == nil {
		t.Fatal("Accept after Close succeeded")
	}
}

func TestListenWhenServingReportsATakenPortOnAccept(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	l := ListenWhenServing(taken.Addr().String())
	defer l.Close()
	if _, err := l.Accept(); err == nil {
		t.Fatal("Accept on a taken port succeeded")
	}
}

func TestListenWhenServingClosedBeforeAcceptNeverBinds(t *testing.T) {
	l := ListenWhenServing("127.0.0.1:0")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close = %v, want net.ErrClosed", err)
	}
	if got := l.Addr().String(); got != "127.0.0.1:0" {
		t.Fatalf("Addr = %q: it bound", got)
	}
}
