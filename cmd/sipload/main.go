// Command sipload is sipvisor's SIPp-like load generator; see docs/SIPLOAD.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sipvisor/sipvisor/loadgen"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := loadgen.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
