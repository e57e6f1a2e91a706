"""The dispatcher: every cycle observe -> snapshot -> decide -> record -> act -> confirm."""
