package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// parseFlags parses a subcommand's flags: its usage goes to stderr for -h
// only; any other mistake is one error naming it, which main prints once
// (the flag package would print it, then the whole usage, then main
// again).
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	usage := fs.Usage
	fs.Usage = func() {} // the flag package calls it after every mistake
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	case err != nil:
		return fmt.Errorf("%w (see %s --help)", err, fs.Name())
	}
	return nil
}
