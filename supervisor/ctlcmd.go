package supervisor

import (
	"context"
	"fmt"
	"io"
)

func runCtl(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "sipvisor ctl: not available in this build")
	return 2
}
