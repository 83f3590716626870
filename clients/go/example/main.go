// Command example leads "billing-scheduler" once and writes one fenced row.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"

	le "leaderelection"
)

func main() {
	ctx := context.Background()
	pool, err := pgxpool.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	err = le.Run(ctx, pool, "billing-scheduler", le.Options{Name: "billing"},
		func(ctx context.Context, l *le.Lease) error {
			return l.Tx(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "INSERT INTO invoices (customer, fencing_token) VALUES ('acme', $1)", l.Token())
				return err
			})
		})
	fmt.Println("done:", err)
}
