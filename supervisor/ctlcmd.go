package supervisor

import (
	"context"
	"io"

	"github.com/sipvisor/sipvisor/ctl"
)

func runCtl(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return ctl.Main(ctx, args, stdout, stderr)
}
