// Command soakplot draws the samples CSV of bench/soak.sh as one chart of
// panels sharing the time axis: sipvisor's RSS per process, each server's
// whole tree (sum of PSS), sipvisor's Go heap per process, and the GC CPU of
// each sipvisor worker. A panel is drawn only when the CSV has its data.
//
//	go run ./bench/soakplot -in soak-samples.csv -out soak.png
//
// The format follows the output's name: .png or .svg.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "soakplot:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("soakplot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "samples CSV written by bench/soak.sh")
	out := fs.String("out", "", "chart to write (.png or .svg)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || *out == "" || fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("want -in CSV -out PNG, and nothing else")
	}
	f, err := os.Open(*in)
	if err != nil {
		return err
	}
	defer f.Close()
	rows, err := readCSV(f, *in)
	if err != nil {
		return err
	}
	return drawChart(*out, rows)
}
