// Command settingsdoc rewrites the settings reference of the operators'
// documentation from the settings table and the defaults its packages own
// (config/owners, which imports them): go generate ./config.
package main

import (
	"fmt"
	"os"

	"flashsale/config"
	"flashsale/config/owners"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "settingsdoc:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: settingsdoc FILE.md")
	}
	doc, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	out, err := config.RewriteReference(doc, owners.Table)
	if err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	return os.WriteFile(args[0], out, 0o644)
}
