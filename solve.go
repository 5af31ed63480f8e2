package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"flashsale/usecase/gate"
)

// runSolve prints a nonce that solves a proof-of-work challenge from
// seckillChallenge: `go run . solve CHALLENGE [difficulty]`, the difficulty
// defaulting to the one the challenge carries. A person walking the flow
// from the playground pastes the challenge here and the nonce back.
func runSolve(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("flashsale solve", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: flashsale solve CHALLENGE [difficulty]

Prints a nonce whose SHA-256(challenge+nonce) has the challenge's leading
zero bits (or difficulty's, 0 to %d, to solve any text), for the
seckillChallenge / seckillTicket flow walked by hand.
`, gate.MaxDifficulty)
	}
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	args = fs.Args()
	if len(args) < 1 || len(args) > 2 {
		fs.Usage()
		return errors.New("solve: want a challenge and, optionally, a difficulty")
	}
	d := -1
	if len(args) == 2 {
		n, err := strconv.Atoi(args[1])
		if err != nil || n < 0 || n > gate.MaxDifficulty {
			return fmt.Errorf("solve: difficulty: want 0 to %d", gate.MaxDifficulty)
		}
		d = n
	} else if _, err := gate.Difficulty(args[0]); err != nil {
		return fmt.Errorf("solve: %w (pass the difficulty as the second argument to solve any text)", err)
	}
	began := time.Now()
	nonce, err := gate.Solve(args[0], d)
	if err != nil {
		return fmt.Errorf("solve: %w", err)
	}
	fmt.Fprintf(stderr, "solved in %s\n", time.Since(began).Round(time.Millisecond))
	_, err = fmt.Fprintln(stdout, nonce)
	return err
}
