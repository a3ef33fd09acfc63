int mori__placeholder;
