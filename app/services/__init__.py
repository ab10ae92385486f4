"""The domain: services own the logic and the transactions; views and the CLI call them."""
