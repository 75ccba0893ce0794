"""What Dr.GRPO fixes, measured: loss weights (`loss_weights`), the length-bias task (`task`, `warm_start`), the
fixed-batch mechanism experiment (`mechanism`), and GRPO vs Dr.GRPO end to end (`experiment`, `report`)."""
