"""The flask commands (app/cli/), run through the click test runner."""
