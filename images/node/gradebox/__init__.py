"""gradebox inside the node image: the verifier runner (``python3 -I -m gradebox.verify``) that
runs ``node --test`` verifiers, the same file as the gradebox that built the image."""
