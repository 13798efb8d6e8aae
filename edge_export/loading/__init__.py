"""Loading the user's model: the four sources, and the allow-list readers that check an untrusted archive before torch sees it."""
